#include "worker/engine/cuda/cuda_token_mask.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/token_mask.h"

namespace hearth {

void CudaTokenMask::apply(std::span<const SampleRequest> requests, std::span<const int> entry_row,
                          float* logits, cudaStream_t st) {
  size_t count = 0;
  for (const SampleRequest& r : requests) count += r.allowed.empty() ? 0 : 1;
  if (count == 0) return;
  if (count > capacity_) {
    // The previous upload may still be in flight from the pinned buffer.
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(st));
    capacity_ = std::max(count, 2 * capacity_);
    host_ = PinnedBuffer(capacity_ * (4 + words_ * 4));
    rows_ = DeviceBuffer(capacity_ * 4);
    masks_ = DeviceBuffer(capacity_ * words_ * 4);
  }
  auto* rows = host_.get<int32_t>();
  auto* masks = reinterpret_cast<uint32_t*>(rows + capacity_);
  size_t i = 0;
  for (const SampleRequest& r : requests) {
    if (r.allowed.empty()) continue;
    if (r.allowed.size() != words_)
      throw std::runtime_error("token mask of " + std::to_string(r.allowed.size()) +
                               " words for a vocabulary of " + std::to_string(vocab_));
    if (r.entry < 0 || size_t(r.entry) >= entry_row.size() || entry_row[size_t(r.entry)] < 0)
      throw std::runtime_error("sample: batch entry " + std::to_string(r.entry) +
                               " has no logits: it did not ask for them in the last forward");
    rows[i] = entry_row[size_t(r.entry)];
    std::copy(r.allowed.begin(), r.allowed.end(), masks + i * words_);
    ++i;
  }
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(rows_.get(), rows, count * 4, cudaMemcpyHostToDevice, st));
  HEARTH_CUDA_CHECK(
      cudaMemcpyAsync(masks_.get(), masks, count * words_ * 4, cudaMemcpyHostToDevice, st));
  kernels::apply_token_masks(logits, vocab_, rows_.get<int32_t>(), masks_.get<uint32_t>(),
                             int(count), st);
}

}  // namespace hearth
