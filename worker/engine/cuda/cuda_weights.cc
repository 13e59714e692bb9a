#include "worker/engine/cuda/cuda_weights.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"

namespace hearth {

namespace {

kernels::Half half_type(DType t, std::string_view name) {
  if (t == DType::BF16) return kernels::Half::BF16;
  if (t == DType::F16) return kernels::Half::F16;
  throw std::runtime_error("the cuda backend needs bf16 or f16 matrices; '" + std::string(name) +
                           "' is f32");
}

}  // namespace

CudaWeights CudaWeights::bind(const WeightStore& store, const ModelConfig& config) {
  const ModelWeights w = bind_weights(store);
  CudaWeights cw;
  cw.type_ = half_type(w.embed.dtype, w.embed.name);
  auto matrix = [&](const WeightRef& m) {
    if (half_type(m.dtype, m.name) != cw.type_)
      throw std::runtime_error("the cuda backend needs every matrix in one 16-bit type; '" +
                               std::string(m.name) + "' differs from the embedding");
    if (reinterpret_cast<uintptr_t>(m.data) % 16 != 0)
      throw std::runtime_error("'" + std::string(m.name) + "' is not 16-byte aligned on the GPU");
    return m.data;
  };
  auto vector = [&](const WeightRef& v) { return v ? cw.upload_as_f32(v) : nullptr; };
  cw.embed_ = w.embed.data;
  cw.lm_head_ = matrix(w.lm_head);
  cw.final_norm_ = vector(w.final_norm);
  for (const LayerWeights& lw : w.layers) {
    const CudaLayerWeights L = lw.convert<const void*, const float*>(matrix, vector);
    cw.layers_.push_back(L);
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

}  // namespace hearth
