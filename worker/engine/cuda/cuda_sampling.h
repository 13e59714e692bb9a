// Sampling for every row of a forward at once on the GPU: each request's parameters and seen
// tokens marshalled into pinned memory, batch_sample over the logits rows, only the chosen
// tokens and their logprobs copied back.
#pragma once

#include <cuda_runtime.h>

#include <span>
#include <vector>

#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda/cuda_memory_plan.h"

namespace hearth {

class CudaSampling {
 public:
  // Up to `max_rows` requests per call over a vocabulary of `vocab`.
  CudaSampling(int max_rows, int vocab, DeviceArena& arena);

  // Request r samples row entry_row[requests[r].entry] of `logits` (vocab floats a row), which
  // must exist (>= 0). Tokens and logprobs only: top_logprobs are the caller's.
  std::vector<SampleResult> sample(std::span<const SampleRequest> requests,
                                   std::span<const int> entry_row, const float* logits,
                                   cudaStream_t stream);

 private:
  int max_rows_, vocab_;
  size_t scratch_bytes_ = 0;
  DeviceBuffer scratch_;
  // Per-row parameters, seen tokens (repetition penalty), results.
  DeviceBuffer params_, offsets_, seen_, tokens_, logprobs_;
  PinnedBuffer host_params_, host_seen_, host_results_;
  size_t seen_capacity_ = 0;  // tokens seen_ and host_seen_ hold
};

}  // namespace hearth
