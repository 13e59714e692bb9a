#include "worker/engine/cuda/cuda_batch_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>

#include "kernels/cuda_check.h"
#include "kernels/ops.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/logprobs.h"

namespace hearth {

namespace {

using kernels::MatmulEpilogue;

// Tokens one sub-step holds at most: the activations grow with it (~100 KB per token on 8B).
constexpr int kMaxStepTokens = 8192;
// Rows batch_sample sorts per pass (a pass's scratch is ~2 MB per row at a 128k vocabulary).
constexpr int kSampleRowsPerPass = 64;
// The KV pool's default share of the memory left free once everything else is allocated.
constexpr double kDefaultPoolFraction = 0.9;

size_t align_up(size_t v, size_t to = 256) {
  return (v + to - 1) / to * to;
}

// Decode graphs cover sequence counts in buckets: every count up to 8, then steps of an eighth
// of the next power of two (at most 12.5% padding).
int sequence_bucket(int n, int cap) {
  if (n <= 8) return std::min(n, cap);
  int p = 16;
  while (p < n) p *= 2;
  const int step = p / 8;
  return std::min((n + step - 1) / step * step, cap);
}

// Key-length bound of a decode graph: a power of two number of attention splits, at most the
// context. The attention grid grows with it, so short sequences keep a small one.
int kv_bucket(int max_kv_len, int context) {
  int b = kernels::kAttentionSplitTokens;
  while (b < max_kv_len) b *= 2;
  return std::min(b, context);
}

}  // namespace

int64_t CudaBatchBackend::kv_bytes_per_token(const ModelConfig& c) {
  return int64_t(c.n_layers) * c.kv_dim() * 2 /* K and V */ * 2 /* 16-bit */;
}

CudaBatchBackend::CudaBatchBackend(std::shared_ptr<const WeightStore> store,
                                   const EngineOptions& options, int context)
    : store_(std::move(store)), c_(store_->config()), options_(options), context_(context) {
  if (store_->residence() != Residence::Device)
    throw std::runtime_error("the cuda backend needs GPU-resident weights");
  const int hd = c_.head_dim;
  if (hd != 16 && hd != 32 && hd != 64 && hd != 128)
    throw std::runtime_error("the batched cuda backend supports head_dim 16, 32, 64 or 128, not " +
                             std::to_string(hd));
  if (c_.n_heads % c_.n_kv_heads != 0 || c_.n_heads / c_.n_kv_heads > 64)
    throw std::runtime_error("the batched cuda backend supports GQA groups of at most 64 heads");
  for (auto [what, k] : {std::pair{"hidden_size", c_.hidden},
                         {"q_dim", c_.q_dim()},
                         {"intermediate_size", c_.intermediate}})
    if (k % 16 != 0)
      throw std::runtime_error(std::string("the batched cuda backend needs ") + what +
                               " to be a multiple of 16, not " + std::to_string(k));
  if (options_.kv_block_size <= 0)
    throw std::runtime_error("kv_block_size must be positive, got " +
                             std::to_string(options_.kv_block_size));
  if (context_ < 1) throw std::runtime_error("context_length must be positive");

  stream_ = make_stream();
  weights_ = CudaWeights::bind(*store_, c_);
  workspace_bytes_ += weights_.copied_bytes();
  weights_.check_kv_cache_dtype(options_.kv_cache_dtype);
  type_ = weights_.type();
  max_tokens_ = std::clamp(options_.max_batch_tokens, 1, kMaxStepTokens);
  max_seqs_ = std::max(options_.max_running, 1);
  max_step_seqs_ = std::min(max_tokens_, max_seqs_);
  const int block = options_.kv_block_size;
  max_blocks_ = (context_ + block - 1) / block;

  // Activations for one sub-step of T tokens, S sequences.
  const size_t T = max_tokens_, S = max_step_seqs_, h = c_.hidden, qd = c_.q_dim(),
               kvd = c_.kv_dim(), inter = c_.intermediate;
  x_ = alloc(T * h * 4);
  xn_ = alloc(T * h * 2);
  q32_ = alloc(T * qd * 4);
  k32_ = alloc(T * kvd * 4);
  v32_ = alloc(T * kvd * 4);
  q16_ = alloc(T * qd * 2);
  att_ = alloc(T * qd * 2);
  act_ = alloc(T * inter * 2);
  xg_ = alloc(S * h * 4);
  xgn_ = alloc(S * h * 2);
  logits_ = alloc(size_t(max_seqs_) * c_.vocab * 4);

  // One matmul workspace serves every shape of the step, in stream order.
  struct Shape {
    int m, n, k;
  };
  const Shape shapes[] = {
      {int(T), c_.q_dim(), c_.hidden},      {int(T), c_.kv_dim(), c_.hidden},
      {int(T), c_.hidden, c_.q_dim()},      {int(T), c_.intermediate, c_.hidden},
      {int(T), c_.hidden, c_.intermediate}, {int(S), c_.vocab, c_.hidden}};
  for (const Shape& s : shapes)
    matmul_ws_bytes_ =
        std::max(matmul_ws_bytes_, kernels::batch_matmul_workspace_bytes(s.m, s.n, s.k));
  matmul_ws_ = alloc(matmul_ws_bytes_);
  if (matmul_ws_bytes_) HEARTH_CUDA_CHECK(cudaMemset(matmul_ws_.get(), 0, matmul_ws_bytes_));
  attention_scratch_bytes_ = kernels::paged_attention_scratch_bytes(
      int(T), int(S), context_, c_.n_heads, c_.head_dim, int(S));
  attention_scratch_ = alloc(attention_scratch_bytes_);
  sample_scratch_bytes_ =
      kernels::batch_sample_scratch_bytes(std::min(max_seqs_, kSampleRowsPerPass), c_.vocab);
  sample_scratch_ = alloc(sample_scratch_bytes_);

  // Step metadata: one copy per sub-step, the block table last so only its used rows travel.
  MetaLayout& m = layout_;
  m.tokens = 0;
  m.pos = align_up(m.tokens + T * 4);
  m.slot = align_up(m.pos + T * 4);
  m.query_start = align_up(m.slot + T * 4);
  m.first_pos = align_up(m.query_start + (S + 1) * 4);
  m.rows = align_up(m.first_pos + S * 4);
  m.block_table = align_up(m.rows + S * 4);
  m.bytes = m.block_table + S * size_t(max_blocks_) * 4;
  meta_ = alloc(m.bytes);
  host_meta_ = PinnedBuffer(m.bytes);
  meta_copied_ = make_event();

  sample_params_ = alloc(size_t(max_seqs_) * sizeof(kernels::SampleRowParams));
  sample_offsets_ = alloc(size_t(max_seqs_ + 1) * 4);
  sample_tokens_ = alloc(size_t(max_seqs_) * 4);
  sample_logprobs_ = alloc(size_t(max_seqs_) * 4);
  host_sample_ = PinnedBuffer(size_t(max_seqs_) * sizeof(kernels::SampleRowParams) +
                              size_t(max_seqs_ + 1) * 4);
  host_results_ = PinnedBuffer(size_t(max_seqs_) * 8);

  if (!options_.batch_invariant) {
    gemm_ = std::make_unique<kernels::Gemm>(type_);
    gemm_->warm_up();  // before any decode graph is captured
    gate16_ = alloc(T * inter * 2);
    up16_ = alloc(T * inter * 2);
  }
  if (options_.matmul_tiling == MatmulTiling::Tuned) tune_matmuls();

  // The KV pool last: by default it takes a share of what is left.
  const int64_t per_token = kv_bytes_per_token(c_);
  if (options_.kv_pool_tokens > 0 || options_.kv_pool_gb > 0) {
    kv_ = resolve_kv_pool(options_, context_, per_token);
  } else {
    const double fraction =
        options_.kv_pool_fraction > 0 ? options_.kv_pool_fraction : kDefaultPoolFraction;
    size_t free = 0, total = 0;
    HEARTH_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    int64_t tokens = int64_t(fraction * double(free)) / per_token;
    tokens = std::min(tokens, int64_t(max_seqs_) * context_);
    if (tokens < context_)
      throw std::runtime_error("the GPU has room for " + std::to_string(tokens) +
                               " KV positions (" + std::to_string(free >> 20) +
                               " MiB free), less than one context of " + std::to_string(context_) +
                               "; lower context_length or free GPU memory");
    kv_ = {block, int(std::min<int64_t>(tokens / block, 1 << 30))};
  }
  if (kv_.num_blocks < 1) throw std::runtime_error("the KV pool holds no block");
  const size_t pool = size_t(c_.n_layers) * kv_.num_blocks * block * kvd * 2;
  k_pool_ = alloc(pool);
  v_pool_ = alloc(pool);
  kv_pool_bytes_ = 2 * pool;
  // Zeroed once: padding rows of decode graphs read block 0, and must see finite values.
  HEARTH_CUDA_CHECK(cudaMemsetAsync(k_pool_.get(), 0, pool, stream_.get()));
  HEARTH_CUDA_CHECK(cudaMemsetAsync(v_pool_.get(), 0, pool, stream_.get()));
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

CudaBatchBackend::~CudaBatchBackend() {
  if (stream_) cudaStreamSynchronize(stream_.get());
}

DeviceBuffer CudaBatchBackend::alloc(size_t bytes) {
  workspace_bytes_ += bytes;
  return DeviceBuffer(bytes);
}

void* CudaBatchBackend::k_pool(int l) const {
  return k_pool_.get<char>() + size_t(l) * kv_.num_blocks * kv_.block_size * c_.kv_dim() * 2;
}
void* CudaBatchBackend::v_pool(int l) const {
  return v_pool_.get<char>() + size_t(l) * kv_.num_blocks * kv_.block_size * c_.kv_dim() * 2;
}

void CudaBatchBackend::synchronize() {
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

int CudaBatchBackend::matmul_band(int m) {
  int band = 0;
  for (int top = 16; band < kMatmulBands - 1 && m > top; top *= 2) ++band;
  return band;
}

void CudaBatchBackend::matmul(MatmulShape shape, MatmulEpilogue epilogue, const void* a,
                              const void* w, const void* w_up, void* out, int m, int n, int k) {
  kernels::MatmulArgs args;
  args.a = a, args.w = w, args.w_up = w_up, args.m = m, args.n = n, args.k = k, args.out = out;
  args.workspace = matmul_ws_.get(), args.workspace_bytes = matmul_ws_bytes_;
  args.tiles = tiles_[shape][matmul_band(m)];
  if (gemm_)
    cublas_matmul(epilogue, a, w, w_up, out, m, n, k);
  else
    kernels::batch_matmul(type_, epilogue, args, stream_.get());
}

void CudaBatchBackend::cublas_matmul(MatmulEpilogue epilogue, const void* a, const void* w,
                                     const void* w_up, void* out, int m, int n, int k) {
  using Out = kernels::Gemm::Out;
  cudaStream_t st = stream_.get();
  switch (epilogue) {
    case MatmulEpilogue::StoreF32:
      return gemm_->run(w, a, out, m, n, k, Out::F32, st);
    case MatmulEpilogue::StoreHalf:
      return gemm_->run(w, a, out, m, n, k, Out::Half, st);
    case MatmulEpilogue::AccumulateF32:
      return gemm_->run(w, a, out, m, n, k, Out::F32Accumulate, st);
    case MatmulEpilogue::SwiGLU:
      gemm_->run(w, a, gate16_.get(), m, n, k, Out::Half, st);
      gemm_->run(w_up, a, up16_.get(), m, n, k, Out::Half, st);
      kernels::swiglu(type_, gate16_.get(), up16_.get(), out, int64_t(m) * n, st, false);
      return;
  }
}

// Times every tiling of every matrix of the step at the top of each band of row counts it
// meets, on the layers' own weights in turn (so they stream from memory, not L2), and keeps
// the fastest where it beats the shape-based choice by more than 3%. Tilings whose scratch
// would be large (K slices spread over many rows) are not tried.
void CudaBatchBackend::tune_matmuls() {
  constexpr size_t kMaxWorkspace = size_t(256) << 20;
  constexpr int kReps = 3;
  struct Job {
    MatmulShape shape;
    MatmulEpilogue epilogue;
    int n, k, max_m;
    const void* a;
    void* out;
  };
  const int T = max_tokens_, S = max_step_seqs_, h = c_.hidden;
  const Job jobs[] = {
      {kQ, MatmulEpilogue::StoreF32, c_.q_dim(), h, T, xn_.get(), q32_.get()},
      {kKV, MatmulEpilogue::StoreF32, c_.kv_dim(), h, T, xn_.get(), k32_.get()},
      {kO, MatmulEpilogue::AccumulateF32, h, c_.q_dim(), T, att_.get(), x_.get()},
      {kGateUp, MatmulEpilogue::SwiGLU, c_.intermediate, h, T, xn_.get(), act_.get()},
      {kDown, MatmulEpilogue::AccumulateF32, h, c_.intermediate, T, act_.get(), x_.get()},
      {kLmHead, MatmulEpilogue::StoreF32, c_.vocab, h, S, xgn_.get(), logits_.get()}};
  auto weight = [&](MatmulShape shape, int i) -> std::pair<const void*, const void*> {
    const CudaLayerWeights& L = weights_.layer(i % weights_.num_layers());
    switch (shape) {
      case kQ:
        return {L.wq, nullptr};
      case kKV:
        return {i % 2 ? L.wk : L.wv, nullptr};
      case kO:
        return {L.wo, nullptr};
      case kGateUp:
        return {L.w_gate, L.w_up};
      case kDown:
        return {L.w_down, nullptr};
      default:
        return {weights_.lm_head(), nullptr};
    }
  };
  const kernels::MatmulTiles candidates[] = {
      kernels::MatmulTiles::Auto, kernels::MatmulTiles::Skinny, kernels::MatmulTiles::Medium,
      kernels::MatmulTiles::Large};
  size_t ws_bytes = matmul_ws_bytes_;
  for (const Job& j : jobs)
    for (kernels::MatmulTiles t : candidates) {
      const size_t need = kernels::batch_matmul_workspace_bytes(j.max_m, j.n, j.k, t);
      if (need <= kMaxWorkspace) ws_bytes = std::max(ws_bytes, need);
    }
  DeviceBuffer ws(ws_bytes);
  HEARTH_CUDA_CHECK(cudaMemset(ws.get(), 0, ws_bytes));
  const CudaEvent start = make_event(cudaEventDefault), stop = make_event(cudaEventDefault);
  cudaStream_t st = stream_.get();
  size_t needed = matmul_ws_bytes_;
  for (const Job& j : jobs) {
    for (int band = 0, bottom = 1; band < kMatmulBands && bottom <= j.max_m; ++band) {
      const int m = std::min(band == kMatmulBands - 1 ? j.max_m : 16 << band, j.max_m);
      bottom = m + 1;
      kernels::MatmulTiles best = kernels::MatmulTiles::Auto;
      float best_ms = 0;
      for (kernels::MatmulTiles t : candidates) {
        const size_t need = kernels::batch_matmul_workspace_bytes(m, j.n, j.k, t);
        if (need > ws_bytes) continue;
        kernels::MatmulArgs args;
        args.a = j.a, args.m = m, args.n = j.n, args.k = j.k, args.out = j.out;
        args.workspace = ws.get(), args.workspace_bytes = ws_bytes, args.tiles = t;
        auto launch = [&](int i) {
          std::tie(args.w, args.w_up) = weight(j.shape, i);
          kernels::batch_matmul(type_, j.epilogue, args, st);
        };
        try {
          launch(kReps);  // warm-up: attributes, and a layer the timed launches do not read
        } catch (const std::logic_error&) {  // invalid_argument too
          continue;  // this tiling cannot take the shape (e.g. too many tiles)
        }
        HEARTH_CUDA_CHECK(cudaEventRecord(start.get(), st));
        for (int i = 0; i < kReps; ++i) launch(i);
        HEARTH_CUDA_CHECK(cudaEventRecord(stop.get(), st));
        HEARTH_CUDA_CHECK(cudaEventSynchronize(stop.get()));
        float ms = 0;
        HEARTH_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
        if (t == kernels::MatmulTiles::Auto || ms < 0.97f * best_ms) best = t, best_ms = ms;
      }
      tiles_[j.shape][band] = best;
      needed = std::max(needed, kernels::batch_matmul_workspace_bytes(m, j.n, j.k, best));
    }
  }
  if (needed > matmul_ws_bytes_) {
    workspace_bytes_ += needed - matmul_ws_bytes_;
    matmul_ws_bytes_ = needed;
    matmul_ws_ = DeviceBuffer(needed);
    HEARTH_CUDA_CHECK(cudaMemset(matmul_ws_.get(), 0, needed));
  }
}

void CudaBatchBackend::layer(int l, const StepShape& s,
                             const kernels::PagedAttentionArgs& attention) {
  const CudaLayerWeights& L = weights_.layer(l);
  const int T = s.tokens, h = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim();
  const float eps = float(c_.rms_eps);
  cudaStream_t st = stream_.get();

  kernels::rmsnorm(type_, x_.get<float>(), L.attn_norm, T, h, eps, xn_.get(), st);
  matmul(kQ, MatmulEpilogue::StoreF32, xn_.get(), L.wq, nullptr, q32_.get(), T, qd, h);
  matmul(kKV, MatmulEpilogue::StoreF32, xn_.get(), L.wk, nullptr, k32_.get(), T, kvd, h);
  matmul(kKV, MatmulEpilogue::StoreF32, xn_.get(), L.wv, nullptr, v32_.get(), T, kvd, h);

  kernels::PagedKvWriteArgs kw;
  kw.q = q32_.get<float>(), kw.k = k32_.get<float>(), kw.v = v32_.get<float>();
  kw.bq = L.bq, kw.bk = L.bk, kw.bv = L.bv, kw.q_norm = L.q_norm, kw.k_norm = L.k_norm;
  kw.inv_freq = weights_.inv_freq();
  kw.pos = dev_meta<int>(layout_.pos), kw.slot = dev_meta<int>(layout_.slot);
  kw.num_tokens = T, kw.n_heads = c_.n_heads, kw.n_kv_heads = c_.n_kv_heads,
  kw.head_dim = c_.head_dim, kw.block_size = kv_.block_size, kw.eps = eps;
  kw.q_out = q16_.get(), kw.k_pool = k_pool(l), kw.v_pool = v_pool(l);
  kernels::paged_kv_write(type_, kw, st);

  kernels::PagedAttentionArgs at = attention;
  at.k_pool = k_pool(l), at.v_pool = v_pool(l);
  kernels::paged_attention(type_, at, st);
  matmul(kO, MatmulEpilogue::AccumulateF32, att_.get(), L.wo, nullptr, x_.get(), T, h, qd);

  kernels::rmsnorm(type_, x_.get<float>(), L.mlp_norm, T, h, eps, xn_.get(), st);
  matmul(kGateUp, MatmulEpilogue::SwiGLU, xn_.get(), L.w_gate, L.w_up, act_.get(), T,
         c_.intermediate, h);
  matmul(kDown, MatmulEpilogue::AccumulateF32, act_.get(), L.w_down, nullptr, x_.get(), T, h,
         c_.intermediate);
}

void CudaBatchBackend::launch(const StepShape& s) {
  cudaStream_t st = stream_.get();
  kernels::embedding(type_, weights_.embed(), dev_meta<int32_t>(layout_.tokens), s.tokens,
                     c_.hidden, x_.get<float>(), st);
  kernels::PagedAttentionArgs at;
  at.q = q16_.get();
  at.query_start = dev_meta<int>(layout_.query_start);
  at.first_pos = dev_meta<int>(layout_.first_pos);
  at.block_table = dev_meta<int>(layout_.block_table);
  at.num_seqs = s.seqs, at.num_tokens = s.tokens, at.max_blocks = max_blocks_,
  at.block_size = kv_.block_size;
  at.n_heads = c_.n_heads, at.n_kv_heads = c_.n_kv_heads, at.head_dim = c_.head_dim;
  at.max_kv_len = s.max_kv_len, at.scale = 1.0f / std::sqrt(float(c_.head_dim));
  at.scratch = attention_scratch_.get(), at.scratch_bytes = attention_scratch_bytes_;
  at.out = att_.get();
  at.k_pool = k_pool(0), at.v_pool = v_pool(0);
  kernels::paged_attention_plan(at, st);
  for (int l = 0; l < c_.n_layers; ++l) layer(l, s, at);
  if (s.rows == 0) return;
  kernels::gather_rows(x_.get<float>(), dev_meta<int32_t>(layout_.rows), s.rows, c_.hidden,
                       xg_.get<float>(), st);
  kernels::rmsnorm(type_, xg_.get<float>(), weights_.final_norm(), s.rows, c_.hidden,
                   float(c_.rms_eps), xgn_.get(), st);
  matmul(kLmHead, MatmulEpilogue::StoreF32, xgn_.get(), weights_.lm_head(), nullptr,
         logits_.get<float>() + size_t(s.logits_row) * c_.vocab, s.rows, c_.vocab, c_.hidden);
}

void CudaBatchBackend::upload_meta(int seqs) {
  const size_t bytes = layout_.block_table + size_t(seqs) * max_blocks_ * 4;
  HEARTH_CUDA_CHECK(
      cudaMemcpyAsync(meta_.get(), host_meta_.get(), bytes, cudaMemcpyHostToDevice, stream_.get()));
  HEARTH_CUDA_CHECK(cudaEventRecord(meta_copied_.get(), stream_.get()));
}

// Entries [first, last) with tokens [first_token, ...) of entry `first` and [..., last_token)
// of entry `last - 1` (token indices within those entries).
void CudaBatchBackend::run_substep(const ForwardBatch& batch, size_t first, size_t last,
                                   int first_token, int last_token, int& logits_row) {
  HEARTH_CUDA_CHECK(cudaEventSynchronize(meta_copied_.get()));  // the pinned copy is free
  int32_t* tokens = host_meta<int32_t>(layout_.tokens);
  int* pos = host_meta<int>(layout_.pos);
  int* slot = host_meta<int>(layout_.slot);
  int* query_start = host_meta<int>(layout_.query_start);
  int* first_pos = host_meta<int>(layout_.first_pos);
  int32_t* rows = host_meta<int32_t>(layout_.rows);
  int* table = host_meta<int>(layout_.block_table);
  StepShape s;
  s.logits_row = logits_row;
  const int bs = kv_.block_size;
  for (size_t e = first; e < last; ++e) {
    const ForwardEntry& entry = batch.entries[e];
    const int n = int(entry.tokens.size());
    const int lo = e == first ? first_token : 0, hi = e + 1 == last ? last_token : n;
    const int seq = s.seqs++;
    query_start[seq] = s.tokens;
    first_pos[seq] = entry.start_pos + lo;
    s.max_kv_len = std::max(s.max_kv_len, entry.start_pos + hi);
    const size_t used = std::min<size_t>(entry.block_table.size(), max_blocks_);
    std::memcpy(table + size_t(seq) * max_blocks_, entry.block_table.data(), used * 4);
    std::fill(table + size_t(seq) * max_blocks_ + used, table + size_t(seq + 1) * max_blocks_, 0);
    for (int i = lo; i < hi; ++i) {
      const int p = entry.start_pos + i;
      tokens[s.tokens] = entry.tokens[i];
      pos[s.tokens] = p;
      slot[s.tokens] = entry.block_table[p / bs] * bs + p % bs;
      ++s.tokens;
    }
    if (hi == n && entry.want_logits) {
      rows[s.rows++] = s.tokens - 1;
      entry_row_[e] = logits_row++;
    }
  }
  query_start[s.seqs] = s.tokens;
  upload_meta(s.seqs);
  launch(s);
}

bool CudaBatchBackend::graphable(const ForwardBatch& batch) const {
  if (!options_.cuda_graphs || int(batch.entries.size()) > max_step_seqs_) return false;
  for (const ForwardEntry& e : batch.entries)
    if (e.tokens.size() != 1 || !e.want_logits) return false;
  return true;
}

// A decode step: every sequence runs one token and wants its logits. Padded to its bucket,
// run from the bucket's graph once one is captured.
void CudaBatchBackend::run_decode(const ForwardBatch& batch) {
  HEARTH_CUDA_CHECK(cudaEventSynchronize(meta_copied_.get()));
  const int n = int(batch.entries.size());
  const int seqs = sequence_bucket(n, max_step_seqs_);
  int max_kv = 1;
  for (const ForwardEntry& e : batch.entries) max_kv = std::max(max_kv, e.start_pos + 1);
  const int kv_bound = kv_bucket(max_kv, context_);
  int32_t* tokens = host_meta<int32_t>(layout_.tokens);
  int* pos = host_meta<int>(layout_.pos);
  int* slot = host_meta<int>(layout_.slot);
  int* query_start = host_meta<int>(layout_.query_start);
  int* first_pos = host_meta<int>(layout_.first_pos);
  int32_t* rows = host_meta<int32_t>(layout_.rows);
  int* table = host_meta<int>(layout_.block_table);
  const int bs = kv_.block_size;
  for (int i = 0; i < seqs; ++i) {
    query_start[i] = i;
    rows[i] = i;
    int* row = table + size_t(i) * max_blocks_;
    if (i >= n) {  // padding: a one-token sequence at position 0 of block 0, writing nothing
      tokens[i] = 0, pos[i] = 0, slot[i] = -1, first_pos[i] = 0;
      std::fill(row, row + max_blocks_, 0);
      continue;
    }
    const ForwardEntry& e = batch.entries[i];
    const int p = e.start_pos;
    tokens[i] = e.tokens[0], pos[i] = p, first_pos[i] = p;
    slot[i] = e.block_table[p / bs] * bs + p % bs;
    const size_t used = std::min<size_t>(e.block_table.size(), max_blocks_);
    std::memcpy(row, e.block_table.data(), used * 4);
    std::fill(row + used, row + max_blocks_, 0);
    entry_row_[i] = i;
  }
  query_start[seqs] = seqs;
  upload_meta(seqs);

  const StepShape s{seqs, seqs, seqs, kv_bound, 0};
  const std::pair key{seqs, kv_bound};
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    // The first run of a bucket is eager: kernels set their attributes and make their plans
    // outside of any capture. The second captures it.
    if (eager_runs_[key]++ == 0) return launch(s);
    cudaGraph_t captured = nullptr;
    HEARTH_CUDA_CHECK(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal));
    try {
      launch(s);
    } catch (...) {
      cudaStreamEndCapture(stream_.get(), &captured);
      if (captured) cudaGraphDestroy(captured);
      throw;
    }
    HEARTH_CUDA_CHECK(cudaStreamEndCapture(stream_.get(), &captured));
    const CudaGraph graph(captured);
    cudaGraphExec_t exec = nullptr;
    HEARTH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0));
    it = graphs_.emplace(key, CudaGraphExec(exec)).first;
  }
  HEARTH_CUDA_CHECK(cudaGraphLaunch(it->second.get(), stream_.get()));
}

void CudaBatchBackend::forward(const ForwardBatch& batch) {
  check_batch(batch);
  entry_row_.assign(batch.entries.size(), -1);
  host_logits_.assign(batch.entries.size(), {});
  if (graphable(batch)) return run_decode(batch);

  // Cut the batch into sub-steps of at most max_tokens_ tokens and max_step_seqs_ sequences;
  // an entry may straddle sub-steps (its later part sees the KV its earlier part wrote).
  int logits_row = 0;
  size_t first = 0;
  int first_token = 0;
  while (first < batch.entries.size()) {
    int tokens = 0, seqs = 0;
    size_t e = first;
    int lo = first_token, hi = 0;
    while (e < batch.entries.size() && tokens < max_tokens_ && seqs < max_step_seqs_) {
      const int n = int(batch.entries[e].tokens.size());
      lo = e == first ? first_token : 0;
      hi = std::min(n, lo + (max_tokens_ - tokens));
      tokens += hi - lo;
      ++seqs;
      ++e;
    }
    // Entries [first, e), the last one up to token `hi`.
    run_substep(batch, first, e, first_token, hi, logits_row);
    const int n_last = int(batch.entries[e - 1].tokens.size());
    if (hi < n_last) {
      first = e - 1;
      first_token = hi;
    } else {
      first = e;
      first_token = 0;
    }
  }
}

void CudaBatchBackend::capture_decode_graphs(int max_kv_len) {
  if (!options_.cuda_graphs) return;
  const int top = kv_bucket(std::clamp(max_kv_len, 1, context_), context_);
  for (int kv = kv_bucket(1, context_);; kv = kv_bucket(kv + 1, context_)) {
    const std::vector<int32_t> table((kv + kv_.block_size - 1) / kv_.block_size, 0);
    const int32_t token = 0;
    for (int n = 1, last = 0; n <= max_step_seqs_; ++n) {
      const int bucket = sequence_bucket(n, max_step_seqs_);
      if (bucket == last) continue;
      last = bucket;
      ForwardBatch batch;
      batch.entries.assign(bucket, ForwardEntry{std::span(&token, 1), kv - 1, table, true});
      while (!graphs_.contains({bucket, kv})) forward(batch);  // eager once, then captured
    }
    if (kv >= top) break;
  }
  synchronize();
}

std::span<const float> CudaBatchBackend::logits(int entry) {
  if (entry < 0 || entry >= int(entry_row_.size()) || entry_row_[entry] < 0)
    throw std::runtime_error("batch entry " + std::to_string(entry) +
                             " has no logits: it did not ask for them in the last forward");
  std::vector<float>& host = host_logits_[entry];
  if (host.empty()) {
    host.resize(c_.vocab);
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(host.data(),
                                      logits_.get<float>() + size_t(entry_row_[entry]) * c_.vocab,
                                      size_t(c_.vocab) * 4, cudaMemcpyDeviceToHost, stream_.get()));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }
  return host;
}

std::vector<SampleResult> CudaBatchBackend::sample(std::span<const SampleRequest> requests) {
  const int R = int(requests.size());
  if (R == 0) return {};
  if (R > max_seqs_)
    throw std::runtime_error("sample: " + std::to_string(R) + " requests, at most " +
                             std::to_string(max_seqs_));
  // Row r of the sampled logits must be request r's: one pass over all rows when the requests
  // name the logits rows 0, 1, 2, ... in order (the engine's case), else one row at a time.
  bool in_order = true;
  for (int r = 0; r < R; ++r) {
    const int e = requests[r].entry;
    if (e < 0 || e >= int(entry_row_.size()) || entry_row_[e] < 0)
      throw std::runtime_error("sample: batch entry " + std::to_string(e) +
                               " has no logits: it did not ask for them in the last forward");
    in_order = in_order && entry_row_[e] == r;
  }

  // Parameters and seen tokens (only rows with a repetition penalty need theirs).
  size_t seen_total = 0;
  for (const SampleRequest& q : requests)
    if (q.params.repetition_penalty != 1.0f) seen_total += q.seen.size();
  if (seen_total > seen_capacity_) {
    seen_capacity_ = std::max(seen_total, 2 * seen_capacity_);
    sample_seen_ = DeviceBuffer(seen_capacity_ * 4);
    host_seen_ = PinnedBuffer(seen_capacity_ * 4);
  }
  auto* params = host_sample_.get<kernels::SampleRowParams>();
  int* offsets = reinterpret_cast<int*>(params + max_seqs_);
  int32_t* seen = host_seen_.get<int32_t>();
  size_t at = 0;
  for (int r = 0; r < R; ++r) {
    const SampleRequest& q = requests[r];
    kernels::SampleRowParams& p = params[r];
    p.seed = q.params.seed, p.step = q.step, p.temperature = q.params.temperature;
    p.top_p = q.params.top_p, p.min_p = q.params.min_p, p.penalty = q.params.repetition_penalty;
    p.top_k = q.params.top_k;
    offsets[r] = int(at);
    if (p.penalty != 1.0f) {
      std::copy(q.seen.begin(), q.seen.end(), seen + at);
      at += q.seen.size();
    }
  }
  offsets[R] = int(at);
  cudaStream_t st = stream_.get();
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(sample_params_.get(), params,
                                    size_t(R) * sizeof(kernels::SampleRowParams),
                                    cudaMemcpyHostToDevice, st));
  if (at > 0) {
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(sample_offsets_.get(), offsets, size_t(R + 1) * 4,
                                      cudaMemcpyHostToDevice, st));
    HEARTH_CUDA_CHECK(
        cudaMemcpyAsync(sample_seen_.get(), seen, at * 4, cudaMemcpyHostToDevice, st));
  }
  kernels::BatchSampleArgs a;
  a.vocab = c_.vocab;
  a.scratch = sample_scratch_.get(), a.scratch_bytes = sample_scratch_bytes_;
  auto run = [&](int r0, int rows, int logits_row) {
    a.logits = logits_.get<float>() + size_t(logits_row) * c_.vocab, a.rows = rows;
    a.params = sample_params_.get<kernels::SampleRowParams>() + r0;
    if (at > 0)  // offsets index the whole seen list, so a row's slice works alone
      a.seen_offsets = sample_offsets_.get<int>() + r0, a.seen_tokens = sample_seen_.get<int32_t>();
    a.tokens = sample_tokens_.get<int32_t>() + r0, a.logprobs = sample_logprobs_.get<float>() + r0;
    kernels::batch_sample(a, st);
  };
  if (in_order)
    run(0, R, 0);
  else
    for (int r = 0; r < R; ++r) run(r, 1, entry_row_[requests[r].entry]);
  int32_t* out_tokens = host_results_.get<int32_t>();
  float* out_logprobs = reinterpret_cast<float*>(out_tokens + max_seqs_);
  HEARTH_CUDA_CHECK(
      cudaMemcpyAsync(out_tokens, sample_tokens_.get(), size_t(R) * 4, cudaMemcpyDeviceToHost, st));
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(out_logprobs, sample_logprobs_.get(), size_t(R) * 4,
                                    cudaMemcpyDeviceToHost, st));
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(st));

  std::vector<SampleResult> results(R);
  for (int r = 0; r < R; ++r) {
    results[r].token = out_tokens[r];
    results[r].logprob = out_logprobs[r];
    if (requests[r].top_logprobs > 0)
      results[r].top = top_logprobs(this->logits(requests[r].entry), requests[r].top_logprobs);
  }
  return results;
}

}  // namespace hearth
