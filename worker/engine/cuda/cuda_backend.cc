#include "worker/engine/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"

namespace hearth {

namespace {

using kernels::GemvArgs;
using kernels::GemvEpilogue;

// Prefills of up to this many tokens keep gate and up in fp32: every GEMM of theirs then has an
// fp32 output, so a cold worker's first prefill needs only that part of cuBLASLt's set-up
// (Gemm::warm_up). The extra bytes cost ~1% at 64 tokens; longer prompts stay 16-bit.
constexpr int kShortPrefill = 64;

}  // namespace

CudaBackend::CudaBackend(std::shared_ptr<const WeightStore> store, const EngineOptions& options,
                         int context, std::shared_ptr<CudaWarmup> warmup)
    : store_(std::move(store)), c_(store_->config()), options_(options), context_(context) {
  if (store_->residence() != Residence::Device)
    throw std::runtime_error("the cuda backend needs GPU-resident weights");
  if (!kernels::attention_prefill_supports(c_.head_dim))
    throw std::runtime_error("the cuda backend supports head_dim 16, 32, 64 or 128, not " +
                             std::to_string(c_.head_dim));
  if (c_.n_heads / c_.n_kv_heads > 16 || (c_.n_heads / c_.n_kv_heads) * c_.head_dim > 1024)
    throw std::runtime_error(
        "the cuda backend supports GQA groups of at most 16 heads (8 at head_dim 128)");
  chunk_ = std::min(context_, 2048);
  if (options_.kv_block_size <= 0)
    throw std::runtime_error("kv_block_size must be positive, got " +
                             std::to_string(options_.kv_block_size));
  kv_ = {options_.kv_block_size, (context_ + options_.kv_block_size - 1) / options_.kv_block_size};
  // Its fused matvecs read 16-bit weights only; the batched engine has the fp8 matmul.
  if (c_.quantization.fp8())
    throw std::runtime_error(
        "cuda_engine \"single\" does not run fp8 weights; use cuda_engine \"batched\"");
  if (options_.kv_cache_dtype == KvCacheDtype::Fp8E4m3)
    throw std::runtime_error(
        "kv_cache_dtype fp8_e4m3 needs the batched cuda engine (cuda_engine \"batched\"); the "
        "single-sequence engine keeps its cache in the weights' 16-bit type");
  stream_ = make_stream();
  weights_ = CudaWeights::bind(*store_, c_);
  workspace_bytes_ += weights_.copied_bytes();
  weights_.check_kv_cache_dtype(options_.kv_cache_dtype);
  type_ = weights_.type();

  const size_t h = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), inter = c_.intermediate;
  const size_t P = chunk_, e = 2;  // 16-bit element size
  x_ = alloc(P * h * 4);
  xn_ = alloc(P * h * e);
  q32_ = alloc(P * qd * 4);
  k32_ = alloc(P * kvd * 4);
  v32_ = alloc(P * kvd * 4);
  q16_ = alloc(P * qd * e);
  att_ = alloc(P * qd * e);
  const size_t mlp_row = std::max(P * e, std::min<size_t>(P, kShortPrefill) * 4);
  gate_ = alloc(mlp_row * inter);
  up_ = alloc(mlp_row * inter);
  act_ = alloc(P * inter * e);
  logits_[0] = alloc(size_t(c_.vocab) * 4);
  logits_[1] = alloc(size_t(c_.vocab) * 4);
  const size_t cache = size_t(c_.n_layers) * c_.n_kv_heads * context_ * c_.head_dim * e;
  k_cache_ = alloc(cache);
  v_cache_ = alloc(cache);
  attn_scratch_ =
      alloc(kernels::decode_attention_scratch_floats(c_.n_heads, c_.head_dim, context_) * 4);
  attn_counters_ = alloc(size_t(c_.n_kv_heads) * sizeof(unsigned));
  HEARTH_CUDA_CHECK(cudaMemset(attn_counters_.get(), 0, attn_counters_.bytes()));
  argmax_scratch_ = alloc(kernels::argmax_scratch_floats(c_.vocab) * 4 + 16);
  sample_scratch_ = alloc(kernels::sample_scratch_bytes(c_.vocab));
  seen_ = alloc(size_t(c_.vocab));
  HEARTH_CUDA_CHECK(cudaMemset(seen_.get(), 0, c_.vocab));
  tokens_ = alloc(P * sizeof(int32_t));
  params_ = alloc(sizeof(Params));
  result_ = alloc(sizeof(Result));
  host_params_ = PinnedBuffer(sizeof(Params));
  host_result_ = PinnedBuffer(sizeof(Result));
  result_ready_ = make_event();
  // Last: the warm-up ran beside everything above and is collected only now.
  if (warmup) gemm_ = warmup->take_gemm();
  if (gemm_ && gemm_->type() != type_) gemm_.reset();
  if (!gemm_ && (options_.decode_gemv == DecodeGemv::Cublas || chunk_ > 1))
    gemm_ = std::make_unique<kernels::Gemm>(type_);
  host_logits_.resize(c_.vocab);
}

CudaBackend::~CudaBackend() {
  // Work still queued (a decode step launched ahead) reads buffers about to be freed.
  if (stream_) cudaStreamSynchronize(stream_.get());
}

DeviceBuffer CudaBackend::alloc(size_t bytes) {
  workspace_bytes_ += bytes;
  return DeviceBuffer(bytes);
}

void* CudaBackend::k_cache(int l) const {
  return k_cache_.get<std::byte>() + size_t(l) * c_.n_kv_heads * context_ * c_.head_dim * 2;
}
void* CudaBackend::v_cache(int l) const {
  return v_cache_.get<std::byte>() + size_t(l) * c_.n_kv_heads * context_ * c_.head_dim * 2;
}

void CudaBackend::gemv(GemvEpilogue epilogue, const GemvArgs& a) {
  if (options_.decode_gemv != DecodeGemv::Cublas)
    return kernels::gemv(type_, epilogue, a, stream_.get());
  // cuBLAS path, for comparison: a separate norm, one matmul per matrix, separate epilogues.
  using Out = kernels::Gemm::Out;
  const void* x = a.x;
  if (a.x_norm) {
    kernels::rmsnorm(type_, a.x_norm, a.norm_weight, 1, a.k, a.eps, xn_.get(), stream_.get());
    x = xn_.get();
  }
  switch (epilogue) {
    case GemvEpilogue::Store:
      for (int m = 0; m < 3 && a.rows[m]; ++m)
        gemm_->run(a.w[m], x, a.out[m], 1, a.rows[m], a.k, Out::F32, stream_.get());
      break;
    case GemvEpilogue::Accumulate:
      gemm_->run(a.w[0], x, a.out[0], 1, a.rows[0], a.k, Out::F32Accumulate, stream_.get());
      break;
    case GemvEpilogue::SwiGLU:
      gemm_->run(a.w[0], x, gate_.get(), 1, a.rows[0], a.k, Out::Half, stream_.get());
      gemm_->run(a.w[1], x, up_.get(), 1, a.rows[0], a.k, Out::Half, stream_.get());
      kernels::swiglu(type_, gate_.get(), up_.get(), a.act, a.rows[0], stream_.get());
      break;
    case GemvEpilogue::QkvRope: {
      float* outs[3] = {q32_.get<float>(), k32_.get<float>(), v32_.get<float>()};
      for (int m = 0; m < 3; ++m)
        gemm_->run(a.w[m], x, outs[m], 1, a.rows[m], a.k, Out::F32, stream_.get());
      kernels::QkvRopeArgs r;
      r.q = outs[0], r.k = outs[1], r.v = outs[2], r.bq = a.bias[0], r.bk = a.bias[1],
      r.bv = a.bias[2];
      r.inv_freq = a.inv_freq, r.start_pos = a.pos, r.n = 1, r.n_heads = c_.n_heads;
      r.n_kv_heads = c_.n_kv_heads, r.head_dim = c_.head_dim, r.context = context_,
      r.eps = float(c_.rms_eps);
      r.q_out = a.q_out, r.k_cache = a.k_cache, r.v_cache = a.v_cache;
      kernels::qkv_rope(type_, r, stream_.get());
      break;
    }
  }
}

void CudaBackend::layer_decode(int l) {
  const CudaLayerWeights& L = weights_.layer(l);
  const int h = c_.hidden;
  const float eps = float(c_.rms_eps);
  const int* pos = &params_.get<Params>()->pos;

  // Norm, q/k/v projections, bias and RoPE in one pass; k and v land in the cache.
  GemvArgs qkv;
  qkv.w[0] = L.wq, qkv.w[1] = L.wk, qkv.w[2] = L.wv;
  qkv.rows[0] = c_.q_dim(), qkv.rows[1] = c_.kv_dim(), qkv.rows[2] = c_.kv_dim();
  qkv.x_norm = x_.get<float>(), qkv.norm_weight = L.attn_norm, qkv.eps = eps, qkv.k = h,
  qkv.prefetch = true;
  if (!c_.qk_norm) {
    qkv.bias[0] = L.bq, qkv.bias[1] = L.bk, qkv.bias[2] = L.bv;
    qkv.inv_freq = weights_.inv_freq(), qkv.pos = pos, qkv.head_dim = c_.head_dim,
    qkv.context = context_;
    qkv.q_out = q16_.get(), qkv.k_cache = k_cache(l), qkv.v_cache = v_cache(l);
    gemv(GemvEpilogue::QkvRope, qkv);
  } else {
    // Qwen3 normalises each whole head before RoPE: projections first, then a separate pass.
    qkv.out[0] = q32_.get<float>(), qkv.out[1] = k32_.get<float>(), qkv.out[2] = v32_.get<float>();
    gemv(GemvEpilogue::Store, qkv);
    kernels::QkvRopeArgs r;
    r.q = q32_.get<float>(), r.k = k32_.get<float>(), r.v = v32_.get<float>();
    r.bq = L.bq, r.bk = L.bk, r.bv = L.bv, r.q_norm = L.q_norm, r.k_norm = L.k_norm;
    r.inv_freq = weights_.inv_freq(), r.start_pos = pos;
    r.n = 1, r.n_heads = c_.n_heads, r.n_kv_heads = c_.n_kv_heads, r.head_dim = c_.head_dim;
    r.context = context_, r.eps = eps;
    r.q_out = q16_.get(), r.k_cache = k_cache(l), r.v_cache = v_cache(l);
    kernels::qkv_rope(type_, r, stream_.get());
  }

  kernels::DecodeAttentionArgs at;
  at.q = q16_.get(), at.k_cache = k_cache(l), at.v_cache = v_cache(l), at.pos = pos;
  at.n_heads = c_.n_heads, at.n_kv_heads = c_.n_kv_heads, at.head_dim = c_.head_dim;
  at.context = context_, at.scale = 1.0f / std::sqrt(float(c_.head_dim));
  at.partial = attn_scratch_.get<float>(), at.counters = attn_counters_.get<unsigned>(),
  at.out = att_.get();
  kernels::attention_decode(type_, at, stream_.get());

  GemvArgs o;
  o.w[0] = L.wo, o.rows[0] = h, o.out[0] = x_.get<float>(), o.x = att_.get(), o.k = c_.q_dim(),
  o.prefetch = true;
  gemv(GemvEpilogue::Accumulate, o);

  GemvArgs gu;
  gu.w[0] = L.w_gate, gu.w[1] = L.w_up, gu.rows[0] = c_.intermediate, gu.act = act_.get();
  gu.x_norm = x_.get<float>(), gu.norm_weight = L.mlp_norm, gu.eps = eps, gu.k = h;
  gemv(GemvEpilogue::SwiGLU, gu);
  GemvArgs d;
  d.w[0] = L.w_down, d.rows[0] = h, d.out[0] = x_.get<float>(), d.x = act_.get(),
  d.k = c_.intermediate;
  gemv(GemvEpilogue::Accumulate, d);
}

void CudaBackend::lm_head(int row, int parity) {
  GemvArgs a;
  a.w[0] = weights_.lm_head(), a.rows[0] = c_.vocab, a.out[0] = logits_[parity].get<float>(),
  a.k = c_.hidden;
  a.x_norm = x_.get<float>() + size_t(row) * c_.hidden, a.norm_weight = weights_.final_norm(),
  a.eps = float(c_.rms_eps);
  gemv(GemvEpilogue::Store, a);
}

void CudaBackend::decode_step(int parity) {
  kernels::embedding(type_, weights_.embed(), &params_.get<Params>()->token, 1, c_.hidden,
                     x_.get<float>(), stream_.get());
  for (int l = 0; l < c_.n_layers; ++l) layer_decode(l);
  lm_head(0, parity);
}

void CudaBackend::launch_decode(int parity) {
  // The first decode runs eagerly (kernel attributes are set, plans made); after that each
  // parity is captured once and replayed.
  if (!options_.cuda_graphs || eager_decodes_ < 1) {
    decode_step(parity);
    ++eager_decodes_;
    return;
  }
  if (!decode_graph_[parity]) {
    cudaGraph_t captured = nullptr;
    HEARTH_CUDA_CHECK(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal));
    decode_step(parity);
    HEARTH_CUDA_CHECK(cudaStreamEndCapture(stream_.get(), &captured));
    const CudaGraph graph(captured);
    cudaGraphExec_t exec = nullptr;
    HEARTH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0));
    decode_graph_[parity].reset(exec);
  }
  HEARTH_CUDA_CHECK(cudaGraphLaunch(decode_graph_[parity].get(), stream_.get()));
}

void CudaBackend::layer_prefill(int l, int n, int start_pos) {
  using Out = kernels::Gemm::Out;
  const CudaLayerWeights& L = weights_.layer(l);
  const int h = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), inter = c_.intermediate;
  kernels::rmsnorm(type_, x_.get<float>(), L.attn_norm, n, h, float(c_.rms_eps), xn_.get(),
                   stream_.get());
  gemm_->run(L.wq, xn_.get(), q32_.get(), n, qd, h, Out::F32, stream_.get());
  gemm_->run(L.wk, xn_.get(), k32_.get(), n, kvd, h, Out::F32, stream_.get());
  gemm_->run(L.wv, xn_.get(), v32_.get(), n, kvd, h, Out::F32, stream_.get());

  kernels::QkvRopeArgs r;
  r.q = q32_.get<float>(), r.k = k32_.get<float>(), r.v = v32_.get<float>();
  r.bq = L.bq, r.bk = L.bk, r.bv = L.bv, r.q_norm = L.q_norm, r.k_norm = L.k_norm;
  r.inv_freq = weights_.inv_freq();
  r.start_pos = &params_.get<Params>()->pos;
  r.n = n, r.n_heads = c_.n_heads, r.n_kv_heads = c_.n_kv_heads, r.head_dim = c_.head_dim;
  r.context = context_, r.eps = float(c_.rms_eps);
  r.q_out = q16_.get(), r.k_cache = k_cache(l), r.v_cache = v_cache(l);
  kernels::qkv_rope(type_, r, stream_.get());

  kernels::PrefillAttentionArgs at;
  at.q = q16_.get(), at.k_cache = k_cache(l), at.v_cache = v_cache(l);
  at.start_pos = start_pos, at.n = n, at.n_heads = c_.n_heads, at.n_kv_heads = c_.n_kv_heads;
  at.head_dim = c_.head_dim, at.context = context_, at.scale = 1.0f / std::sqrt(float(c_.head_dim));
  at.out = att_.get();
  kernels::attention_prefill(type_, at, stream_.get());
  gemm_->run(L.wo, att_.get(), x_.get(), n, h, qd, Out::F32Accumulate, stream_.get());

  kernels::rmsnorm(type_, x_.get<float>(), L.mlp_norm, n, h, float(c_.rms_eps), xn_.get(),
                   stream_.get());
  const bool short_prefill = n <= kShortPrefill;
  const Out mlp_out = short_prefill ? Out::F32 : Out::Half;
  gemm_->run(L.w_gate, xn_.get(), gate_.get(), n, inter, h, mlp_out, stream_.get());
  gemm_->run(L.w_up, xn_.get(), up_.get(), n, inter, h, mlp_out, stream_.get());
  kernels::swiglu(type_, gate_.get(), up_.get(), act_.get(), int64_t(n) * inter, stream_.get(),
                  short_prefill);
  gemm_->run(L.w_down, act_.get(), x_.get(), n, h, inter, Out::F32Accumulate, stream_.get());
}

void CudaBackend::prefill_chunk(int n, int start_pos) {
  kernels::embedding(type_, weights_.embed(), tokens_.get<int32_t>(), n, c_.hidden, x_.get<float>(),
                     stream_.get());
  for (int l = 0; l < c_.n_layers; ++l) layer_prefill(l, n, start_pos);
  lm_head(n - 1, current_);
}

void CudaBackend::forward(std::span<const int32_t> tokens, int start_pos) {
  const int n = int(tokens.size());
  if (n == 0) throw std::runtime_error("forward needs at least one token");
  if (start_pos < 0 || start_pos + n > context_)
    throw std::runtime_error("context length " + std::to_string(context_) + " exceeded: " +
                             std::to_string(start_pos + n) + " positions requested");
  for (int32_t t : tokens)
    if (t < 0 || t >= c_.vocab)
      throw std::runtime_error("token id " + std::to_string(t) + " is outside the vocabulary (" +
                               std::to_string(c_.vocab) + ")");
  host_logits_valid_ = false;

  if (n == 1 && ahead_) {
    const Ahead ahead = *ahead_;
    ahead_.reset();
    if (ahead.token == tokens[0] && ahead.pos == start_pos) {  // already running: adopt it
      current_ ^= 1;
      last_pos_ = start_pos;
      return;
    }
  }
  ahead_.reset();  // a different step was asked for; the stream orders it after the guess
  // The pinned parameter block may still be read by a copy the last call queued.
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  if (n == 1) {
    host_params_.get<Params>()->token = tokens[0];
    host_params_.get<Params>()->pos = start_pos;
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(params_.get(), host_params_.get(), sizeof(Params),
                                      cudaMemcpyHostToDevice, stream_.get()));
    current_ ^= 1;
    launch_decode(current_);
    last_pos_ = start_pos;
    return;
  }
  current_ ^= 1;
  for (int done = 0; done < n; done += chunk_) {
    const int m = std::min(chunk_, n - done);
    host_params_.get<Params>()->token = tokens[done];
    host_params_.get<Params>()->pos = start_pos + done;
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(params_.get(), host_params_.get(), sizeof(Params),
                                      cudaMemcpyHostToDevice, stream_.get()));
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(tokens_.get(), tokens.data() + done, m * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, stream_.get()));
    if (m == 1)
      decode_step(current_);  // a lone trailing token: same path as decode
    else
      prefill_chunk(m, start_pos + done);
    // The host params buffer is reused by the next chunk.
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }
  last_pos_ = start_pos + n - 1;
}

void CudaBackend::forward(const ForwardBatch& batch) {
  if (batch.entries.size() != 1)
    throw std::runtime_error("the cuda backend runs one sequence per forward, got " +
                             std::to_string(batch.entries.size()));
  forward(batch.entries[0].tokens, batch.entries[0].start_pos);
}

std::span<const float> CudaBackend::logits(int entry) {
  if (entry != 0)
    throw std::runtime_error("the cuda backend runs one sequence per forward: no entry " +
                             std::to_string(entry));
  return logits();
}

std::vector<SampleResult> CudaBackend::sample(std::span<const SampleRequest> requests) {
  std::vector<SampleResult> results;
  for (const SampleRequest& r : requests) {
    if (r.entry != 0)
      throw std::runtime_error("the cuda backend runs one sequence per forward: no entry " +
                               std::to_string(r.entry));
    SampleResult& out = results.emplace_back();
    // Before sample(), which may start the next decode step ahead on the device.
    if (r.top_logprobs > 0) out.top = top_logprobs(logits(), r.top_logprobs);
    const SampledToken s = sample(r.params, r.seen, r.step);
    out.token = s.token;
    out.logprob = s.logprob;
  }
  return results;
}

std::span<const float> CudaBackend::logits() {
  if (!host_logits_valid_) {
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(host_logits_.data(), logits_[current_].get(),
                                      host_logits_.size() * 4, cudaMemcpyDeviceToHost,
                                      stream_.get()));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    host_logits_valid_ = true;
  }
  return host_logits_;
}

void CudaBackend::synchronize() {
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void CudaBackend::upload_seen(std::span<const int32_t> seen) {
  // The seen list grows by one token per step; upload only what is new.
  const bool extends = seen.size() >= uploaded_seen_.size() &&
                       std::equal(uploaded_seen_.begin(), uploaded_seen_.end(), seen.begin());
  if (!extends) {
    std::vector<uint8_t> flags(c_.vocab, 0);
    for (int32_t t : seen)
      if (t >= 0 && t < c_.vocab) flags[t] = 1;
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(seen_.get(), flags.data(), flags.size(),
                                      cudaMemcpyHostToDevice, stream_.get()));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));  // `flags` dies here
  } else {
    static const uint8_t one = 1;
    for (size_t i = uploaded_seen_.size(); i < seen.size(); ++i)
      if (seen[i] >= 0 && seen[i] < c_.vocab)
        HEARTH_CUDA_CHECK(cudaMemcpyAsync(seen_.get<uint8_t>() + seen[i], &one, 1,
                                          cudaMemcpyHostToDevice, stream_.get()));
  }
  uploaded_seen_.assign(seen.begin(), seen.end());
}

SampledToken CudaBackend::sample(const SamplingParams& params, std::span<const int32_t> seen,
                                 uint64_t step) {
  // logit_bias and the frequency / presence penalties have no kernel on this one-sequence
  // path: the host sampler (the same rules, the same arithmetic) serves those requests.
  if (!params.logit_bias.empty() || params.frequency_penalty != 0.0f ||
      params.presence_penalty != 0.0f)
    return Sampler().sample(logits(), params, seen, step);
  const bool penalise = params.repetition_penalty != 1.0f;
  if (penalise) upload_seen(seen);
  const uint8_t* flags = penalise ? seen_.get<uint8_t>() : nullptr;
  Result* r = result_.get<Result>();
  const float* logits = logits_[current_].get<float>();
  if (params.greedy()) {
    kernels::argmax_logprob(logits, c_.vocab, flags, params.repetition_penalty,
                            argmax_scratch_.get<float>(), &r->token, &r->logprob, stream_.get());
  } else {
    kernels::SampleArgs a;
    a.logits = logits, a.vocab = c_.vocab, a.seen = flags, a.penalty = params.repetition_penalty;
    a.temperature = params.temperature, a.top_k = params.top_k, a.top_p = params.top_p,
    a.min_p = params.min_p;
    a.seed = params.seed, a.step = step, a.token = &r->token, a.logprob = &r->logprob;
    a.scratch = sample_scratch_.get();
    kernels::sample(a, stream_.get());
  }
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(host_result_.get(), r, sizeof(Result), cudaMemcpyDeviceToHost,
                                    stream_.get()));
  HEARTH_CUDA_CHECK(cudaEventRecord(result_ready_.get(), stream_.get()));
  // Most callers forward the sampled token next: start that step now, on the device, so the
  // GPU keeps working while the host streams this token out. forward() adopts it, or the
  // stream simply orders whatever is asked for instead after it.
  const int next = last_pos_ + 1;
  const bool decode_ahead =
      options_.cuda_graphs && eager_decodes_ >= 1 && last_pos_ >= 0 && next < context_;
  if (decode_ahead) {
    kernels::set_decode_params(&r->token, &params_.get<Params>()->token,
                               &params_.get<Params>()->pos, next, stream_.get());
    launch_decode(current_ ^ 1);
  }
  HEARTH_CUDA_CHECK(cudaEventSynchronize(result_ready_.get()));
  if (decode_ahead) ahead_ = Ahead{host_result_.get<Result>()->token, next};
  const SampledToken sampled{host_result_.get<Result>()->token,
                             host_result_.get<Result>()->logprob};
  check_device_sample(sampled, c_.vocab, step);
  return sampled;
}

}  // namespace hearth
