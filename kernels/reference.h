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

// ---- References of the batched kernels (kernels/batch_ops.h) ----
// Plain arrays with the kernels' layouts, so the CPU engine can run the same math.

// out[i][j] = sum_c a[i * lda + c] * w[j * k + c] (+ bias[j]): a [m][lda], w [n][k] (row-major,
// the HF layout), bias optional [n], out [m][n]. Accumulated in double.
void matmul(const float* a, int64_t lda, const float* w, const float* bias, int m, int n, int k,
            float* out);

// Token t of q [t][n_heads * head_dim], k and v [t][n_kv_heads * head_dim]: bias (optional),
// per-head RMSNorm (optional q_norm / k_norm [head_dim]), RoPE at pos[t] (pairs i,
// i + head_dim / 2, inv_freq [head_dim / 2]). q goes to q_out (same layout); k and v rows go to
// the pools [num_blocks][n_kv_heads][block_size][head_dim] at slot[t] = block * block_size +
// offset, or nowhere when slot[t] < 0. block_stride: values from one block to the next (0:
// packed blocks, n_kv_heads * block_size * head_dim).
void paged_kv_write(const float* q, const float* k, const float* v, const float* bq,
                    const float* bk, const float* bv, const float* q_norm, const float* k_norm,
                    const float* inv_freq, const int* pos, const int* slot, int num_tokens,
                    int n_heads, int n_kv_heads, int head_dim, int block_size, float eps,
                    float* q_out, float* k_pool, float* v_pool, int64_t block_stride = 0);

// Causal attention of a mixed step: sequence s owns query tokens query_start[s] ..
// query_start[s + 1] - 1 at positions first_pos[s] + i; its position p lives in the pools
// (layout above) at block block_table[s * max_blocks + p / block_size], offset p % block_size.
// q and out [num_tokens][n_heads * head_dim]; query head h reads kv head h / (n_heads /
// n_kv_heads); a query at position p sees keys 0..p.
void paged_attention(const float* q, const float* k_pool, const float* v_pool,
                     const int* query_start, const int* first_pos, const int* block_table,
                     int num_seqs, int max_blocks, int block_size, int n_heads, int n_kv_heads,
                     int head_dim, float scale, float* out, int64_t block_stride = 0);

}  // namespace hearth::reference
