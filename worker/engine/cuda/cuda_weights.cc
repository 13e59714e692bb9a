#include "worker/engine/cuda/cuda_weights.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/fp8_matmul.h"

namespace hearth {

namespace {

kernels::Half half_type(DType t, std::string_view name) {
  if (t == DType::BF16) return kernels::Half::BF16;
  if (t == DType::F16) return kernels::Half::F16;
  throw std::runtime_error("the cuda backend needs bf16 or f16 matrices here; '" +
                           std::string(name) + "' is " + std::string(dtype_name(t)));
}

}  // namespace

CudaWeights CudaWeights::bind(const WeightStore& store, const ModelConfig& config) {
  const ModelWeights w = bind_weights(store);
  CudaWeights cw;
  cw.type_ = half_type(w.embed.dtype, w.embed.name);
  // fp8 or not is decided by the first projection; every other must agree.
  cw.fp8_ = !w.layers.empty() && w.layers[0].wq.dtype == DType::F8_E4M3;
  if (cw.fp8_) kernels::require_fp8_matmul();  // off Hopper: its message, before any copy
  auto aligned = [](const WeightRef& m) {
    if (reinterpret_cast<uintptr_t>(m.data) % 16 != 0)
      throw std::runtime_error("'" + std::string(m.name) + "' is not 16-byte aligned on the GPU");
    return m.data;
  };
  auto matrix = [&](const WeightRef& m) {
    if (cw.fp8_ != (m.dtype == DType::F8_E4M3))
      throw std::runtime_error("the cuda backend needs every decoder projection in fp8 or none; '" +
                               std::string(m.name) + "' is " + std::string(dtype_name(m.dtype)) +
                               (cw.fp8_ ? " in an fp8 model" : " in a 16-bit model"));
    if (cw.fp8_) return aligned(m);
    if (half_type(m.dtype, m.name) != cw.type_)
      throw std::runtime_error("the cuda backend needs every matrix in one 16-bit type; '" +
                               std::string(m.name) + "' differs from the embedding");
    return aligned(m);
  };
  auto vector = [&](const WeightRef& v) { return v ? cw.upload_as_f32(v) : nullptr; };
  cw.embed_ = w.embed.data;
  if (half_type(w.lm_head.dtype, w.lm_head.name) != cw.type_)
    throw std::runtime_error("the cuda backend needs the LM head in the embedding's type; '" +
                             std::string(w.lm_head.name) + "' differs");
  cw.lm_head_ = aligned(w.lm_head);
  cw.final_norm_ = vector(w.final_norm);
  for (const LayerWeights& lw : w.layers) {
    const CudaLayerWeights L = lw.convert<const void*, const float*>(matrix, vector);
    cw.layers_.push_back(L);
    cw.scales_.push_back(
        !cw.fp8_ ? CudaLayerScales{}
                 : lw.convert<const float*, const float*>(
                       [&](const WeightRef& m) { return m ? cw.upload_row_scales(m) : nullptr; },
                       [](const WeightRef&) -> const float* { return nullptr; }));
  }
  const std::vector<float> inv = rope_inverse_frequencies(config);
  cw.inv_freq_ = DeviceBuffer(inv.size() * sizeof(float));
  HEARTH_CUDA_CHECK(cudaMemcpy(cw.inv_freq_.get(), inv.data(), inv.size() * sizeof(float),
                               cudaMemcpyHostToDevice));
  return cw;
}

size_t CudaWeights::copied_bytes() const {
  size_t bytes = inv_freq_.bytes();
  for (const DeviceBuffer& b : copies_) bytes += b.bytes();
  return bytes;
}

void CudaWeights::check_kv_cache_dtype(KvCacheDtype kv_cache_dtype) const {
  if (kv_cache_dtype == KvCacheDtype::Fp8E4m3) return;  // codes + scales beside any weights
  if (kv_cache_dtype != KvCacheDtype::Auto &&
      (kv_cache_dtype == KvCacheDtype::Bf16) != (type_ == kernels::Half::BF16))
    throw std::runtime_error("kv_cache_dtype " + std::string(option_name(kv_cache_dtype)) +
                             " differs from the weights' type; the cuda backend keeps the cache "
                             "in the weights' 16-bit type");
}

const float* CudaWeights::upload_as_f32(const WeightRef& v) {
  const size_t n = size_t(v.rows) * v.cols;
  std::vector<uint8_t> raw(n * dtype_size(v.dtype));
  HEARTH_CUDA_CHECK(cudaMemcpy(raw.data(), v.data, raw.size(), cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = load_as_f32(raw.data(), v.dtype, i);
  copies_.emplace_back(n * sizeof(float));
  HEARTH_CUDA_CHECK(
      cudaMemcpy(copies_.back().get(), f.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  return copies_.back().get<float>();
}

const float* CudaWeights::upload_row_scales(const WeightRef& m) {
  if (!m.scale || (m.scale_count != 1 && m.scale_count != m.rows))
    throw std::runtime_error("'" + std::string(m.name) + "' has no scale of 1 or " +
                             std::to_string(m.rows) + " values");
  std::vector<uint8_t> raw(size_t(m.scale_count) * dtype_size(m.scale_dtype));
  HEARTH_CUDA_CHECK(cudaMemcpy(raw.data(), m.scale, raw.size(), cudaMemcpyDeviceToHost));
  std::vector<float> f(size_t(m.rows));
  for (size_t r = 0; r < f.size(); ++r)
    f[r] = load_as_f32(raw.data(), m.scale_dtype, m.scale_count == 1 ? 0 : r);
  copies_.emplace_back(f.size() * sizeof(float));
  HEARTH_CUDA_CHECK(
      cudaMemcpy(copies_.back().get(), f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice));
  return copies_.back().get<float>();
}

}  // namespace hearth
