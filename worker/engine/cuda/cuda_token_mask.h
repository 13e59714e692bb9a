// Structured output on the batched CUDA backend: the masks of the requests that carry one
// (SampleRequest::allowed) uploaded each step and applied in place to their logits rows
// before the sampler reads them. Rows without a mask are untouched; a step with none launches
// nothing.
#pragma once

#include <cuda_runtime.h>

#include <span>

#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"
#include "worker/engine/backend.h"

namespace hearth {

class CudaTokenMask {
 public:
  explicit CudaTokenMask(int vocab) : vocab_(vocab), words_((size_t(vocab) + 31) / 32) {}

  // Request r's mask applies to row entry_row[requests[r].entry] of `logits`.
  void apply(std::span<const SampleRequest> requests, std::span<const int> entry_row, float* logits,
             cudaStream_t stream);

 private:
  int vocab_;
  size_t words_;
  size_t capacity_ = 0;  // rows the buffers hold
  PinnedBuffer host_;    // rows, then masks
  DeviceBuffer rows_, masks_;
};

}  // namespace hearth
