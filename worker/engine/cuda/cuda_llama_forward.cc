#include "worker/engine/cuda/cuda_llama_forward.h"

#include <cmath>

#include "kernels/ops.h"

namespace hearth {

using kernels::MatmulEpilogue;

CudaLlamaForward::CudaLlamaForward(const ModelConfig& c, const CudaWeights& weights,
                                   const StepLimits& limits, const EngineOptions& options,
                                   int context_length, DeviceArena& arena, cudaStream_t stream)
    : config_(c),
      weights_(weights),
      type_(weights.type()),
      // Sized for one sub-step of T tokens, S sequences (the logits: every row of a forward).
      x_(arena.alloc(size_t(limits.max_tokens) * c.hidden * 4)),
      xn_(arena.alloc(size_t(limits.max_tokens) * c.hidden * 2)),
      q32_(arena.alloc(size_t(limits.max_tokens) * c.q_dim() * 4)),
      k32_(arena.alloc(size_t(limits.max_tokens) * c.kv_dim() * 4)),
      v32_(arena.alloc(size_t(limits.max_tokens) * c.kv_dim() * 4)),
      q16_(arena.alloc(size_t(limits.max_tokens) * c.q_dim() * 2)),
      att_(arena.alloc(size_t(limits.max_tokens) * c.q_dim() * 2)),
      act_(arena.alloc(size_t(limits.max_tokens) * c.intermediate * 2)),
      xg_(arena.alloc(size_t(limits.max_step_seqs) * c.hidden * 4)),
      xgn_(arena.alloc(size_t(limits.max_step_seqs) * c.hidden * 2)),
      logits_(arena.alloc(size_t(limits.max_seqs) * c.vocab * 4)),
      matmuls_(c, limits, type_, options.batch_invariant, arena) {
  const int T = limits.max_tokens, S = limits.max_step_seqs;
  attention_scratch_bytes_ =
      kernels::paged_attention_scratch_bytes(T, S, context_length, c.n_heads, c.head_dim, S);
  attention_scratch_ = arena.alloc(attention_scratch_bytes_);
  if (options.matmul_tiling == MatmulTiling::Tuned) {
    const int h = c.hidden;
    const CudaMatmuls::TuneJob jobs[] = {
        {kQ, MatmulEpilogue::StoreF32, c.q_dim(), h, T, xn_.get(), q32_.get()},
        {kKV, MatmulEpilogue::StoreF32, c.kv_dim(), h, T, xn_.get(), k32_.get()},
        {kO, MatmulEpilogue::AccumulateF32, h, c.q_dim(), T, att_.get(), x_.get()},
        {kGateUp, MatmulEpilogue::SwiGLU, c.intermediate, h, T, xn_.get(), act_.get()},
        {kDown, MatmulEpilogue::AccumulateF32, h, c.intermediate, T, act_.get(), x_.get()},
        {kLmHead, MatmulEpilogue::StoreF32, c.vocab, h, S, xgn_.get(), logits_.get()}};
    matmuls_.tune(jobs, weights_, stream, arena);
  }
}

void CudaLlamaForward::layer(int l, const StepShape& s, const StepInputs& in, const CudaKvPool& kv,
                             const kernels::PagedAttentionArgs& attention, cudaStream_t st) {
  const ModelConfig& c = config_;
  const CudaLayerWeights& L = weights_.layer(l);
  const int T = s.tokens, h = c.hidden, qd = c.q_dim(), kvd = c.kv_dim();
  const float eps = float(c.rms_eps);

  kernels::rmsnorm(type_, x_.get<float>(), L.attn_norm, T, h, eps, xn_.get(), st);
  mark(StepPhase::Norm, st);
  if (matmuls_.fuses_qkv()) {  // one launch, the same bits
    matmuls_.run_qkv(xn_.get(), L.wq, L.wk, L.wv, q32_.get(), k32_.get(), v32_.get(), T, qd, kvd, h,
                     st);
    mark(StepPhase::QKV, st);
  } else {
    matmuls_.run(kQ, MatmulEpilogue::StoreF32, xn_.get(), L.wq, nullptr, q32_.get(), T, qd, h, st);
    mark(StepPhase::Q, st);
    matmuls_.run(kKV, MatmulEpilogue::StoreF32, xn_.get(), L.wk, nullptr, k32_.get(), T, kvd, h,
                 st);
    matmuls_.run(kKV, MatmulEpilogue::StoreF32, xn_.get(), L.wv, nullptr, v32_.get(), T, kvd, h,
                 st);
    mark(StepPhase::KV, st);
  }

  kernels::PagedKvWriteArgs kw;
  kw.q = q32_.get<float>(), kw.k = k32_.get<float>(), kw.v = v32_.get<float>();
  kw.bq = L.bq, kw.bk = L.bk, kw.bv = L.bv, kw.q_norm = L.q_norm, kw.k_norm = L.k_norm;
  kw.inv_freq = weights_.inv_freq();
  kw.pos = in.pos(), kw.slot = in.slot();
  kw.num_tokens = T, kw.n_heads = c.n_heads, kw.n_kv_heads = c.n_kv_heads, kw.head_dim = c.head_dim,
  kw.block_size = kv.shape().block_size, kw.eps = eps;
  kw.q_out = q16_.get(), kw.k_pool = kv.k(l), kw.v_pool = kv.v(l);
  kw.block_stride = kv.block_stride();
  kernels::paged_kv_write(type_, kw, st);
  mark(StepPhase::KvWrite, st);

  kernels::PagedAttentionArgs at = attention;
  at.k_pool = kv.k(l), at.v_pool = kv.v(l);
  kernels::paged_attention(type_, at, st);
  mark(StepPhase::Attention, st);
  matmuls_.run(kO, MatmulEpilogue::AccumulateF32, att_.get(), L.wo, nullptr, x_.get(), T, h, qd,
               st);
  mark(StepPhase::O, st);

  kernels::rmsnorm(type_, x_.get<float>(), L.mlp_norm, T, h, eps, xn_.get(), st);
  mark(StepPhase::Norm, st);
  matmuls_.run(kGateUp, MatmulEpilogue::SwiGLU, xn_.get(), L.w_gate, L.w_up, act_.get(), T,
               c.intermediate, h, st);
  mark(StepPhase::GateUp, st);
  matmuls_.run(kDown, MatmulEpilogue::AccumulateF32, act_.get(), L.w_down, nullptr, x_.get(), T, h,
               c.intermediate, st);
  mark(StepPhase::Down, st);
}

void CudaLlamaForward::launch(const StepShape& s, const StepInputs& in, const CudaKvPool& kv,
                              cudaStream_t st) {
  const ModelConfig& c = config_;
  kernels::embedding(type_, weights_.embed(), in.tokens(), s.tokens, c.hidden, x_.get<float>(), st);
  mark(StepPhase::Inputs, st);
  kernels::PagedAttentionArgs at;
  at.q = q16_.get();
  at.query_start = in.query_start();
  at.first_pos = in.first_pos();
  at.block_table = in.block_table();
  at.num_seqs = s.seqs, at.num_tokens = s.tokens, at.max_blocks = in.max_blocks(),
  at.block_size = kv.shape().block_size;
  at.n_heads = c.n_heads, at.n_kv_heads = c.n_kv_heads, at.head_dim = c.head_dim;
  at.max_kv_len = s.max_kv_len, at.scale = 1.0f / std::sqrt(float(c.head_dim));
  at.scratch = attention_scratch_.get(), at.scratch_bytes = attention_scratch_bytes_;
  at.out = att_.get();
  at.k_pool = kv.k(0), at.v_pool = kv.v(0), at.block_stride = kv.block_stride();
  kernels::paged_attention_plan(at, st);
  mark(StepPhase::Inputs, st);
  for (int l = 0; l < c.n_layers; ++l) layer(l, s, in, kv, at, st);
  if (s.rows == 0) return;
  kernels::gather_rows(x_.get<float>(), in.rows(), s.rows, c.hidden, xg_.get<float>(), st);
  kernels::rmsnorm(type_, xg_.get<float>(), weights_.final_norm(), s.rows, c.hidden,
                   float(c.rms_eps), xgn_.get(), st);
  matmuls_.run(kLmHead, MatmulEpilogue::StoreF32, xgn_.get(), weights_.lm_head(), nullptr,
               logits_.get<float>() + size_t(s.logits_row) * c.vocab, s.rows, c.vocab, c.hidden,
               st);
  mark(StepPhase::Head, st);
}

}  // namespace hearth
