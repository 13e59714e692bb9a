#include "worker/engine/cuda/cuda_matmuls.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cuda_check.h"
#include "kernels/cuda_handles.h"
#include "kernels/fp8_matmul.h"
#include "kernels/fp8_quantize.h"
#include "kernels/ops.h"
#include "kernels/wgmma_matmul.h"

namespace hearth {

using kernels::MatmulEpilogue;

int matmul_band(int m) {
  int band = 0;
  for (int top = 16; band < kMatmulBands - 1 && m > top; top *= 2) ++band;
  return band;
}

CudaMatmuls::CudaMatmuls(const ModelConfig& c, const StepLimits& limits, kernels::Half type,
                         bool batch_invariant, bool fp8, DeviceArena& arena)
    : type_(type), max_tokens_(limits.max_tokens), max_step_seqs_(limits.max_step_seqs) {
  const int T = limits.max_tokens, S = limits.max_step_seqs;
  struct Shape {
    int m, n, k;
    bool swiglu = false;
  };
  // q, k and v also as one launch (run_qkv), gate and up as SwiGLU.
  const Shape shapes[] = {{T, c.q_dim(), c.hidden},
                          {T, c.kv_dim(), c.hidden},
                          {T, c.q_dim() + 2 * c.kv_dim(), c.hidden},
                          {T, c.hidden, c.q_dim()},
                          {T, c.intermediate, c.hidden, true},
                          {T, c.hidden, c.intermediate},
                          {S, c.vocab, c.hidden}};
  for (const Shape& s : shapes)
    ws_bytes_ = std::max(ws_bytes_, kernels::batch_matmul_workspace_bytes(
                                        s.m, s.n, s.k, kernels::MatmulTiles::Auto, s.swiglu));
  ws_ = arena.alloc(ws_bytes_);
  if (ws_bytes_) HEARTH_CUDA_CHECK(cudaMemset(ws_.get(), 0, ws_bytes_));
  if (!batch_invariant) {
    gemm_ = std::make_unique<kernels::Gemm>(type_);
    gemm_->warm_up();
    if (!fp8) {  // an fp8 model's SwiGLU is the fp8 matmul's epilogue
      gate16_ = arena.alloc(size_t(T) * c.intermediate * 2);
      up16_ = arena.alloc(size_t(T) * c.intermediate * 2);
    }
  }
  if (fp8) {
    const int widest = std::max({c.hidden, c.q_dim(), c.intermediate});
    codes_ = arena.alloc(size_t(T) * widest);
    row_scales_ = arena.alloc(size_t(T) * sizeof(float));
  }
}

void CudaMatmuls::quantize(const void* a, int m, int k, cudaStream_t stream) {
  kernels::Fp8QuantizeArgs q;
  q.in = a, q.rows = m, q.k = k, q.codes = codes_.get<uint8_t>();
  q.scales = row_scales_.get<float>();
  kernels::fp8_quantize_rows(type_, q, stream);
  quantized_m_ = m, quantized_k_ = k;
}

void CudaMatmuls::rmsnorm_quantize(const float* x, const float* weight, int m, int k, float eps,
                                   cudaStream_t stream) {
  kernels::rmsnorm_fp8(type_, x, weight, m, k, eps, codes_.get<uint8_t>(), row_scales_.get<float>(),
                       stream);
  quantized_m_ = m, quantized_k_ = k;
}

void CudaMatmuls::run_fp8(MatmulEpilogue epilogue, const void* w, const float* w_scale,
                          const void* w_up, const float* w_up_scale, void* out, int m, int n, int k,
                          cudaStream_t stream) {
  if (m != quantized_m_ || k != quantized_k_)
    throw std::logic_error("fp8 matmul of " + std::to_string(m) + "x" + std::to_string(k) +
                           " on a quantized input of " + std::to_string(quantized_m_) + "x" +
                           std::to_string(quantized_k_));
  kernels::Fp8MatmulArgs args;
  args.a = codes_.get<uint8_t>(), args.a_scale = row_scales_.get<float>();
  args.w = static_cast<const uint8_t*>(w), args.w_scale = w_scale;
  args.w_up = static_cast<const uint8_t*>(w_up), args.w_up_scale = w_up_scale;
  args.m = m, args.n = n, args.k = k, args.out = out, args.a_rows_readable = max_tokens_;
  kernels::fp8_matmul(type_, epilogue, args, kernels::Fp8Tiles::Auto, stream);
}

void CudaMatmuls::run(MatmulShape shape, MatmulEpilogue epilogue, const void* a, const void* w,
                      const void* w_up, void* out, int m, int n, int k, cudaStream_t stream) {
  if (gemm_) return cublas(epilogue, a, w, w_up, out, m, n, k, stream);
  kernels::MatmulArgs args;
  args.a = a, args.w = w, args.w_up = w_up, args.m = m, args.n = n, args.k = k, args.out = out;
  args.a_rows_readable = shape == kLmHead ? max_step_seqs_ : max_tokens_;
  args.workspace = ws_.get(), args.workspace_bytes = ws_bytes_;
  args.tiles = tiles_[shape][matmul_band(m)];
  kernels::batch_matmul(type_, epilogue, args, stream);
}

bool CudaMatmuls::fuses_qkv() const {
  return !gemm_ && kernels::wgmma_matmul_available();
}

void CudaMatmuls::run_qkv(const void* a, const void* wq, const void* wk, const void* wv, void* q,
                          void* k, void* v, int m, int q_dim, int kv_dim, int hidden,
                          cudaStream_t stream) {
  const MatmulEpilogue e = MatmulEpilogue::StoreF32;
  if (!fuses_qkv()) {
    run(kQ, e, a, wq, nullptr, q, m, q_dim, hidden, stream);
    run(kKV, e, a, wk, nullptr, k, m, kv_dim, hidden, stream);
    run(kKV, e, a, wv, nullptr, v, m, kv_dim, hidden, stream);
    return;
  }
  // The tuned q and kv tilings were timed on each weight alone: the fused launch picks its own
  // (any wgmma tiling gives the same bits).
  kernels::MatmulArgs args;
  args.a = a, args.w = wq, args.m = m, args.n = q_dim, args.k = hidden, args.out = q;
  args.a_rows_readable = max_tokens_;
  args.workspace = ws_.get(), args.workspace_bytes = ws_bytes_;
  args.more[0] = {wk, nullptr, k, kv_dim};
  args.more[1] = {wv, nullptr, v, kv_dim};
  kernels::wgmma_matmul(type_, e, args, kernels::WgmmaTiles::Auto, stream);
}

void CudaMatmuls::run_qkv_fp8(const void* wq, const float* sq, const void* wk, const float* sk,
                              const void* wv, const float* sv, void* q, void* k, void* v, int m,
                              int q_dim, int kv_dim, int hidden, cudaStream_t stream) {
  if (m != quantized_m_ || hidden != quantized_k_)
    throw std::logic_error("fp8 q/k/v of " + std::to_string(m) + "x" + std::to_string(hidden) +
                           " on a quantized input of " + std::to_string(quantized_m_) + "x" +
                           std::to_string(quantized_k_));
  kernels::Fp8MatmulArgs args;
  args.a = codes_.get<uint8_t>(), args.a_scale = row_scales_.get<float>();
  args.w = static_cast<const uint8_t*>(wq), args.w_scale = sq;
  args.m = m, args.n = q_dim, args.k = hidden, args.out = q, args.a_rows_readable = max_tokens_;
  args.more[0] = {static_cast<const uint8_t*>(wk), sk, nullptr, k, kv_dim};
  args.more[1] = {static_cast<const uint8_t*>(wv), sv, nullptr, v, kv_dim};
  kernels::fp8_matmul(type_, MatmulEpilogue::StoreF32, args, kernels::Fp8Tiles::Auto, stream);
}

void CudaMatmuls::cublas(MatmulEpilogue epilogue, const void* a, const void* w, const void* w_up,
                         void* out, int m, int n, int k, cudaStream_t st) {
  using Out = kernels::Gemm::Out;
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

void CudaMatmuls::tune(std::span<const TuneJob> jobs, const CudaWeights& weights, cudaStream_t st,
                       DeviceArena& arena) {
  constexpr size_t kMaxWorkspace = size_t(256) << 20;
  constexpr int kReps = 3;
  auto weight = [&](MatmulShape shape, int i) -> std::pair<const void*, const void*> {
    const CudaLayerWeights& L = weights.layer(i % weights.num_layers());
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
        return {weights.lm_head(), nullptr};
    }
  };
  const kernels::MatmulTiles candidates[] = {
      kernels::MatmulTiles::Auto, kernels::MatmulTiles::Skinny, kernels::MatmulTiles::Medium,
      kernels::MatmulTiles::Large};
  size_t ws_bytes = ws_bytes_;
  for (const TuneJob& j : jobs)
    for (kernels::MatmulTiles t : candidates) {
      const size_t need = kernels::batch_matmul_workspace_bytes(
          j.max_m, j.n, j.k, t, j.epilogue == MatmulEpilogue::SwiGLU);
      if (need <= kMaxWorkspace) ws_bytes = std::max(ws_bytes, need);
    }
  DeviceBuffer ws(ws_bytes);
  HEARTH_CUDA_CHECK(cudaMemset(ws.get(), 0, ws_bytes));
  const CudaEvent start = make_event(cudaEventDefault), stop = make_event(cudaEventDefault);
  size_t needed = ws_bytes_;
  for (const TuneJob& j : jobs) {
    for (int band = 0, bottom = 1; band < kMatmulBands && bottom <= j.max_m; ++band) {
      const int m = std::min(band == kMatmulBands - 1 ? j.max_m : 16 << band, j.max_m);
      bottom = m + 1;
      kernels::MatmulTiles best = kernels::MatmulTiles::Auto;
      float best_ms = 0;
      for (kernels::MatmulTiles t : candidates) {
        const size_t need = kernels::batch_matmul_workspace_bytes(
            m, j.n, j.k, t, j.epilogue == MatmulEpilogue::SwiGLU);
        if (need > ws_bytes) continue;
        kernels::MatmulArgs args;
        args.a = j.a, args.m = m, args.n = j.n, args.k = j.k, args.out = j.out;
        args.a_rows_readable = j.max_m;
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
      needed = std::max(needed, kernels::batch_matmul_workspace_bytes(
                                    m, j.n, j.k, best, j.epilogue == MatmulEpilogue::SwiGLU));
    }
  }
  if (needed > ws_bytes_) {
    arena.count(needed - ws_bytes_);
    ws_bytes_ = needed;
    ws_ = DeviceBuffer(needed);
    HEARTH_CUDA_CHECK(cudaMemset(ws_.get(), 0, needed));
  }
}

}  // namespace hearth
