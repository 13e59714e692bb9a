#include "worker/engine/cuda/cuda_llama_forward.h"

#include <cmath>
#include <span>

#include "kernels/ops.h"
#include "kernels/rmsnorm_rows.h"
#include "kernels/tp_ops.h"

namespace hearth {

using kernels::MatmulEpilogue;

CudaLlamaForward::CudaLlamaForward(const ModelConfig& c, const CudaWeights& weights,
                                   const StepLimits& limits, const EngineOptions& options,
                                   int context_length, DeviceArena& arena, cudaStream_t stream,
                                   std::optional<CudaTpRank> tp)
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
      xgn_(arena.alloc(size_t(limits.max_step_seqs) * c.hidden * 2)),
      logits_(arena.alloc(size_t(limits.max_seqs) * c.vocab * 4)),
      matmuls_(c, limits, type_, options.batch_invariant, weights.fp8(), arena),
      tp_(std::move(tp)) {
  const int T = limits.max_tokens, S = limits.max_step_seqs;
  if (tp_) partial_ = arena.alloc(size_t(T) * c.hidden * 4);
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
    // fp8: the projections' kernel picks its own tiles (any gives the same bits); the LM head
    // is the one 16-bit matrix to tune.
    const std::span<const CudaMatmuls::TuneJob> tuned =
        weights.fp8() ? std::span(jobs).last(1) : std::span(jobs);
    matmuls_.tune(tuned, weights_, stream, arena);
  }
}

void CudaLlamaForward::layer(int l, const StepShape& s, const StepInputs& in, const CudaKvPool& kv,
                             const kernels::PagedAttentionArgs& attention, cudaStream_t st,
                             LayerPart part) {
  const ModelConfig& c = config_;
  const CudaLayerWeights& L = weights_.layer(l);
  const CudaLayerScales& S = weights_.scales(l);  // fp8 only
  const int T = s.tokens, h = c.hidden, qd = c.q_dim(), kvd = c.kv_dim();
  const float eps = float(c.rms_eps);
  const bool fp8 = weights_.fp8();
  // fp8: `a` quantized once for the projections after it that read it.
  auto input = [&](const void* a, int k) {
    if (fp8) matmuls_.quantize(a, T, k, st);
  };
  // rmsnorm into xn_, or (fp8) straight into the quantized input: the same codes as
  // quantizing xn_, without writing it.
  auto norm = [&](const float* weight) {
    if (fp8) return matmuls_.rmsnorm_quantize(x_.get<float>(), weight, T, h, eps, st);
    kernels::rmsnorm(type_, x_.get<float>(), weight, T, h, eps, xn_.get(), st);
  };
  auto matmul = [&](MatmulShape shape, MatmulEpilogue e, const void* a, const void* w,
                    const float* w_scale, const void* w_up, const float* w_up_scale, void* out,
                    int n, int k) {
    if (fp8) return matmuls_.run_fp8(e, w, w_scale, w_up, w_up_scale, out, T, n, k, st);
    matmuls_.run(shape, e, a, w, w_up, out, T, n, k, st);
  };

  // Tensor parallel, 16-bit: the all-reduce before each of these norms may have written it
  // (CudaTpRank); if not, it runs here, at the start of the part.
  const bool fused = tp_fuses_norm();
  if (part != LayerPart::Mlp) {
    if (!xn_from_all_reduce_) norm(L.attn_norm);
    mark(StepPhase::Norm, st);
    // q, k and v in one launch where the kernel allows (the bits of three).
    if (fp8) {
      matmuls_.run_qkv_fp8(L.wq, S.wq, L.wk, S.wk, L.wv, S.wv, q32_.get(), k32_.get(), v32_.get(),
                           T, qd, kvd, h, st);
      mark(StepPhase::QKV, st);
    } else if (matmuls_.fuses_qkv()) {
      matmuls_.run_qkv(xn_.get(), L.wq, L.wk, L.wv, q32_.get(), k32_.get(), v32_.get(), T, qd, kvd,
                       h, st);
      mark(StepPhase::QKV, st);
    } else {
      matmul(kQ, MatmulEpilogue::StoreF32, xn_.get(), L.wq, S.wq, nullptr, nullptr, q32_.get(), qd,
             h);
      mark(StepPhase::Q, st);
      matmul(kKV, MatmulEpilogue::StoreF32, xn_.get(), L.wk, S.wk, nullptr, nullptr, k32_.get(),
             kvd, h);
      matmul(kKV, MatmulEpilogue::StoreF32, xn_.get(), L.wv, S.wv, nullptr, nullptr, v32_.get(),
             kvd, h);
      mark(StepPhase::KV, st);
    }

    kernels::PagedKvWriteArgs kw;
    kw.q = q32_.get<float>(), kw.k = k32_.get<float>(), kw.v = v32_.get<float>();
    kw.bq = L.bq, kw.bk = L.bk, kw.bv = L.bv, kw.q_norm = L.q_norm, kw.k_norm = L.k_norm;
    kw.inv_freq = weights_.inv_freq();
    kw.pos = in.pos(), kw.slot = in.slot();
    kw.num_tokens = T, kw.n_heads = c.n_heads, kw.n_kv_heads = c.n_kv_heads,
    kw.head_dim = c.head_dim, kw.block_size = kv.shape().block_size, kw.eps = eps;
    kw.q_out = q16_.get(), kw.k_pool = kv.k(l), kw.v_pool = kv.v(l);
    kw.block_stride = kv.block_stride();
    kw.fp8_kv = kv.fp8(), kw.kv_scale_offset = kv.scale_offset();
    kernels::paged_kv_write(type_, kw, st);
    mark(StepPhase::KvWrite, st);

    kernels::PagedAttentionArgs at = attention;
    at.k_pool = kv.k(l), at.v_pool = kv.v(l);
    kernels::paged_attention(type_, at, st);
    mark(StepPhase::Attention, st);
    input(att_.get(), qd);
    // Tensor parallel: this rank's partial product, summed over the ranks into the residual.
    if (tp_) {
      matmul(kO, MatmulEpilogue::StoreF32, att_.get(), L.wo, S.wo, nullptr, nullptr, partial_.get(),
             h, qd);
      const kernels::AllReduceNorm mlp_norm = tp_norm(L.mlp_norm);
      xn_from_all_reduce_ = tp_->all_reduce(partial_.get<float>(), x_.get<float>(), int64_t(T) * h,
                                            true, fused ? &mlp_norm : nullptr, st);
    } else {
      matmul(kO, MatmulEpilogue::AccumulateF32, att_.get(), L.wo, S.wo, nullptr, nullptr, x_.get(),
             h, qd);
    }
    mark(StepPhase::O, st);
  }
  if (part == LayerPart::Attention) return;

  if (!xn_from_all_reduce_) norm(L.mlp_norm);
  mark(StepPhase::Norm, st);
  matmul(kGateUp, MatmulEpilogue::SwiGLU, xn_.get(), L.w_gate, S.w_gate, L.w_up, S.w_up, act_.get(),
         c.intermediate, h);
  mark(StepPhase::GateUp, st);
  input(act_.get(), c.intermediate);
  if (tp_) {
    matmul(kDown, MatmulEpilogue::StoreF32, act_.get(), L.w_down, S.w_down, nullptr, nullptr,
           partial_.get(), h, c.intermediate);
    // The last layer's rows go to the head's gathered norm instead (finish()): unfused.
    const bool next = fused && l + 1 < c.n_layers;
    const kernels::AllReduceNorm next_norm =
        next ? tp_norm(weights_.layer(l + 1).attn_norm) : kernels::AllReduceNorm{};
    xn_from_all_reduce_ = tp_->all_reduce(partial_.get<float>(), x_.get<float>(), int64_t(T) * h,
                                          true, next ? &next_norm : nullptr, st);
  } else {
    matmul(kDown, MatmulEpilogue::AccumulateF32, act_.get(), L.w_down, S.w_down, nullptr, nullptr,
           x_.get(), h, c.intermediate);
  }
  mark(StepPhase::Down, st);
}

void CudaLlamaForward::launch(const StepShape& s, const StepInputs& in, const CudaKvPool& kv,
                              cudaStream_t st) {
  begin(s, in, kv, st);
  for (int l = 0; l < config_.n_layers; ++l) layer(l, s, in, kv, attention_, st);
  finish(s, in, st);
}

void CudaLlamaForward::begin(const StepShape& s, const StepInputs& in, const CudaKvPool& kv,
                             cudaStream_t st) {
  const ModelConfig& c = config_;
  if (!tp_) {
    kernels::embedding(type_, weights_.embed(), in.tokens(), s.tokens, c.hidden, x_.get<float>(),
                       st);
    mark(StepPhase::Inputs, st);
  }
  kernels::PagedAttentionArgs& at = attention_;
  at = {};
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
  at.pool_blocks = kv.addressable_blocks();
  at.fp8_kv = kv.fp8(), at.kv_scale_offset = kv.scale_offset();
  kernels::paged_attention_plan(at, st);
  mark(StepPhase::Inputs, st);
  if (tp_) {
    // Each token's row comes from the one rank holding it; the others add zeros. The
    // all-reduce is the last launch of the part (see CudaTpRank).
    kernels::embedding_range(type_, weights_.embed(), in.tokens(), s.tokens, c.hidden,
                             tp_->vocab_begin, tp_->vocab_end, partial_.get<float>(), st);
    const kernels::AllReduceNorm first_norm = tp_norm(weights_.layer(0).attn_norm);
    xn_from_all_reduce_ =
        tp_->all_reduce(partial_.get<float>(), x_.get<float>(), int64_t(s.tokens) * c.hidden, false,
                        tp_fuses_norm() ? &first_norm : nullptr, st);
  }
}

bool CudaLlamaForward::tp_fuses_norm() const {
  return tp_ && !weights_.fp8();
}

kernels::AllReduceNorm CudaLlamaForward::tp_norm(const float* weight) const {
  kernels::AllReduceNorm n;
  n.weight = weight;
  n.hidden = config_.hidden;
  n.eps = float(config_.rms_eps);
  n.type = type_;
  n.out = xn_.get();
  return n;
}

void CudaLlamaForward::finish(const StepShape& s, const StepInputs& in, cudaStream_t st) {
  const ModelConfig& c = config_;
  if (s.rows == 0) return;
  // The sampled rows' final norm, gathered in the same launch (kernels/rmsnorm_rows.h).
  kernels::rmsnorm_rows(type_, x_.get<float>(), in.rows(), weights_.final_norm(), s.rows, c.hidden,
                        float(c.rms_eps), xgn_.get(), st);
  matmuls_.run(kLmHead, MatmulEpilogue::StoreF32, xgn_.get(), weights_.lm_head(), nullptr,
               logits_.get<float>() + size_t(s.logits_row) * c.vocab, s.rows, c.vocab, c.hidden,
               st);
  mark(StepPhase::Head, st);
}

}  // namespace hearth
