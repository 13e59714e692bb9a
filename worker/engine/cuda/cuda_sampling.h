// Sampling for every row of a forward at once on the GPU: each request's parameters and token
// edits (logit_bias, penalties) marshalled into pinned memory, batch_sample over the logits
// rows, only the chosen tokens, their logprobs and the asked-for top_logprobs copied back.
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
  // must exist (>= 0). Tokens, logprobs and each request's top_logprobs, all from the device.
  // `done`, if given, is recorded on `stream` after the last copy back, before the wait.
  std::vector<SampleResult> sample(std::span<const SampleRequest> requests,
                                   std::span<const int> entry_row, const float* logits,
                                   cudaStream_t stream, cudaEvent_t done = nullptr);

 private:
  int max_rows_, vocab_;
  // Per-row parameters, token edits, results.
  DeviceBuffer params_, offsets_, edits_, tokens_, logprobs_, top_tokens_, top_logprobs_;
  PinnedBuffer host_params_, host_edits_, host_results_;
  size_t edit_capacity_ = 0;  // edits edits_ and host_edits_ hold
};

}  // namespace hearth
