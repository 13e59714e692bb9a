// The CUDA kernels of the engine, as host-callable launchers. Matmul operands and activations
// that feed matmuls are 16-bit (bf16 or f16, the weights' type); the residual stream, q/k/v
// before RoPE, norms' weights and logits are fp32. Every launcher is asynchronous on `stream`
// and checks the launch. Each kernel has a CPU reference in kernels/reference.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::kernels {

enum class Half { BF16, F16 };

// x[t, :] = float(table[tokens[t], :])
void embedding(Half type, const void* table, const int32_t* tokens, int n, int hidden, float* x,
               cudaStream_t stream);

// out[t, :] = half(weight * x[t, :] / rms(x[t, :]))
void rmsnorm(Half type, const float* x, const float* weight, int n, int hidden, float eps,
             void* out, cudaStream_t stream);

// After the QKV projection: bias, per-head RMSNorm (Qwen3), RoPE on q and k, q out as 16-bit,
// k and v into the layer's cache at positions start_pos[0] + t.
struct QkvRopeArgs {
  const float* q = nullptr;  // [n, n_heads * head_dim]
  const float* k = nullptr;  // [n, n_kv_heads * head_dim]
  const float* v = nullptr;
  const float* bq = nullptr;  // optional biases
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* q_norm = nullptr;  // optional [head_dim] weights
  const float* k_norm = nullptr;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  const int* start_pos = nullptr;   // device pointer
  int n = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, context = 0;
  float eps = 1e-6f;
  void* q_out = nullptr;    // [n, n_heads * head_dim]
  void* k_cache = nullptr;  // this layer: [n_kv_heads][context][head_dim]
  void* v_cache = nullptr;
};
void qkv_rope(Half type, const QkvRopeArgs& args, cudaStream_t stream);

// act = silu(gate) * up, elementwise over `count` values: gate and up 16-bit, or fp32 when
// `fp32_inputs`; act 16-bit.
void swiglu(Half type, const void* gate, const void* up, void* act, int64_t count,
            cudaStream_t stream, bool fp32_inputs = false);

// Batch-1 matrix-vector products for decode, streaming the weights once at full bandwidth.
//   Store:      out[m][r] = W_m[r, :] . x                 (up to 3 stacked matrices, e.g. q/k/v)
//   Accumulate: out[0][r] += W_0[r, :] . x                (o_proj / down_proj into the residual)
//   SwiGLU:     act[r] = silu(W_0[r, :] . x) * (W_1[r, :] . x)   (gate and up in one pass)
//   QkvRope:    q/k/v projections with bias and RoPE applied, q to q_out, k and v into the cache
//               at position pos[0]: the whole attention input in one kernel.
// x is either 16-bit (`x`), or fp32 with an RMSNorm applied on the fly (`x_norm`, `norm_weight`).
// Kernels launch with programmatic dependent launch: each starts streaming its weights while
// the kernel before it finishes, and waits for that kernel only before reading x.
enum class GemvEpilogue { Store, Accumulate, SwiGLU, QkvRope };
struct GemvArgs {
  const void* w[3] = {nullptr, nullptr, nullptr};  // row-major [rows[m], k]
  int rows[3] = {0, 0, 0};
  float* out[3] = {nullptr, nullptr, nullptr};
  void* act = nullptr;                 // SwiGLU output, 16-bit [rows[0]]
  const void* x = nullptr;             // 16-bit [k]
  const float* x_norm = nullptr;       // or fp32 [k], normalised with...
  const float* norm_weight = nullptr;  // ...this weight
  float eps = 1e-6f;
  int k = 0;
  int split = 0;  // warps sharing one row (1, 2, 4, 8); 0 chooses by shape
  // Start streaming the first weights into L2 before waiting for the previous kernel: pays
  // after short, latency-bound kernels (attention, the previous layer's last GEMV), costs a
  // little L2 traffic elsewhere.
  bool prefetch = false;
  // QkvRope only: w/rows are q, k, v; heads of head_dim; optional fp32 biases.
  const float* bias[3] = {nullptr, nullptr, nullptr};
  const float* inv_freq = nullptr;
  const int* pos = nullptr;
  int head_dim = 0, context = 0;
  void* q_out = nullptr;
  void* k_cache = nullptr;  // this layer: [kv_heads][context][head_dim]
  void* v_cache = nullptr;
};
void gemv(Half type, GemvEpilogue epilogue, const GemvArgs& args, cudaStream_t stream);

// Attention of one new token (at position pos[0], attending to 0..pos[0]) over the cache.
// The context is split across blocks (more splits for longer contexts), each reading its
// keys and values once per GQA group; the last block of a group merges the splits in split
// order, so the result does not depend on scheduling. Launched with programmatic dependent
// launch: a block loads the cache rows written by earlier steps before waiting for the
// kernel that wrote this step's row.
struct DecodeAttentionArgs {
  const void* q = nullptr;  // [n_heads * head_dim]
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int* pos = nullptr;  // device pointer
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, context = 0;
  float scale = 1.0f;
  float* partial = nullptr;      // scratch: decode_attention_scratch_floats(...) floats
  unsigned* counters = nullptr;  // scratch: n_kv_heads zeroed counters, left zeroed
  void* out = nullptr;           // [n_heads * head_dim]
};
size_t decode_attention_scratch_floats(int n_heads, int head_dim, int context);
void attention_decode(Half type, const DecodeAttentionArgs& args, cudaStream_t stream);

// Causal attention of n new tokens at positions start_pos..start_pos+n-1 over the cache
// (which already holds their keys and values): tiled, online softmax, tensor cores.
struct PrefillAttentionArgs {
  const void* q = nullptr;  // [n, n_heads * head_dim]
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  int start_pos = 0, n = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, context = 0;
  float scale = 1.0f;
  void* out = nullptr;  // [n, n_heads * head_dim]
};
void attention_prefill(Half type, const PrefillAttentionArgs& args, cudaStream_t stream);
bool attention_prefill_supports(int head_dim);

// Greedy choice: argmax of the (repetition-penalised) logits, lowest id among equals, and the
// log-softmax of the raw logits at that token. `seen` (optional) flags penalised tokens.
size_t argmax_scratch_floats(int vocab);
void argmax_logprob(const float* logits, int vocab, const uint8_t* seen, float penalty,
                    float* scratch, int32_t* token, float* logprob, cudaStream_t stream);

// Feeds a sampled token back as the next decode step's input without a trip through the host:
// *token_out = *sampled, *pos_out = pos.
void set_decode_params(const int32_t* sampled, int32_t* token_out, int32_t* pos_out, int pos,
                       cudaStream_t stream);

// Sampling with the host sampler's rules (worker/engine/sampler.h), on the GPU: penalised logits
// sorted by (logit desc, id asc), temperature, top-k, top-p, min-p, and the Gumbel-max pick of
// kernels/sampling_rules.h within the kept prefix. Writes the token and its raw log-softmax.
// logit_bias and frequency / presence penalties are the host sampler's on this path.
struct SampleArgs {
  const float* logits = nullptr;
  int vocab = 0;
  const uint8_t* seen = nullptr;  // optional: tokens the repetition penalty applies to
  float penalty = 1.0f, temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0;
  uint64_t seed = 0, step = 0;
  int32_t* token = nullptr;
  float* logprob = nullptr;
  void* scratch = nullptr;  // sample_scratch_bytes(vocab)
};
size_t sample_scratch_bytes(int vocab);
void sample(const SampleArgs& args, cudaStream_t stream);

}  // namespace hearth::kernels
