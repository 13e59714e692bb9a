#include "worker/engine/cuda/device_rank_store.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "weight-server/model/dtype.h"

namespace hearth {

DeviceRankStore::DeviceRankStore(const WeightStore& pieces, int device) : device_(device) {
  if (pieces.residence() != Residence::Host)
    throw std::runtime_error("a rank's GPU upload needs its pieces on the host");
  config_ = pieces.config();
  int previous = 0;
  HEARTH_CUDA_CHECK(cudaGetDevice(&previous));
  HEARTH_CUDA_CHECK(cudaSetDevice(device));
  try {
    std::vector<uint16_t> rounded;
    for (const StoredTensor& t : pieces.tensors()) {
      TensorInfo info = t.info;
      const void* src = t.data;
      if (info.dtype == DType::F32 && info.shape.size() == 2 && !info.name.ends_with("_scale")) {
        const uint64_t n = info.numel();
        rounded.resize(n);
        const float* f = static_cast<const float*>(t.data);
        for (uint64_t i = 0; i < n; ++i) rounded[i] = f32_to_bf16(f[i]);
        info.dtype = DType::BF16;
        info.bytes = n * 2;
        src = rounded.data();
      }
      buffers_.emplace_back(std::max<size_t>(info.bytes, 1));
      HEARTH_CUDA_CHECK(cudaMemcpy(buffers_.back().get(), src, info.bytes, cudaMemcpyHostToDevice));
      add_tensor(StoredTensor{info, buffers_.back().get(), buffers_.back().bytes(),
                              uint32_t(buffers_.size() - 1)});
    }
  } catch (...) {
    cudaSetDevice(previous);
    throw;
  }
  HEARTH_CUDA_CHECK(cudaSetDevice(previous));
}

uint64_t DeviceRankStore::device_bytes() const {
  uint64_t bytes = 0;
  for (const DeviceBuffer& b : buffers_) bytes += b.bytes();
  return bytes;
}

}  // namespace hearth
