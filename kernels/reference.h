// Plain C++ references of the CUDA kernels, in fp32/fp64 on values the tests have already
// rounded to the kernels' 16-bit inputs. Slow and obvious on purpose.
#pragma once

#include <cstdint>
#include <vector>

namespace hearth::reference {

// out[t][i] = w[i] * x[t][i] / rms(x[t])
std::vector<float> rmsnorm(const std::vector<float>& x, const std::vector<float>& w, int n,
                           int hidden, float eps);

// q/k/v [n][heads*head_dim] -> bias, optional per-head norm, RoPE (pairs i, i+head_dim/2) at
// position start_pos + t. Returns q; writes k and v rows into caches [kv_heads][context][head_dim].
struct QkvRope {
  std::vector<float> q_out;
};
QkvRope qkv_rope(std::vector<float> q, std::vector<float> k, std::vector<float> v,
                 const std::vector<float>& bq, const std::vector<float>& bk,
                 const std::vector<float>& bv, const std::vector<float>& q_norm,
                 const std::vector<float>& k_norm, const std::vector<float>& inv_freq,
                 int start_pos, int n, int n_heads, int n_kv_heads, int head_dim, int context,
                 float eps, std::vector<float>& k_cache, std::vector<float>& v_cache);

// out[r] = sum_k w[r][k] * x[k], accumulated in double.
std::vector<float> gemv(const std::vector<float>& w, const std::vector<float>& x, int rows, int k);

// Causal attention of n queries at positions start_pos.. over caches [kv_heads][context][head_dim].
std::vector<float> attention(const std::vector<float>& q, const std::vector<float>& k_cache,
                             const std::vector<float>& v_cache, int start_pos, int n, int n_heads,
                             int n_kv_heads, int head_dim, int context, float scale);

float silu(float x);

}  // namespace hearth::reference
