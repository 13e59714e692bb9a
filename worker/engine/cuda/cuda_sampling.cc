#include "worker/engine/cuda/cuda_sampling.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/batch_ops.h"
#include "kernels/cuda_check.h"

namespace hearth {

namespace {

// Rows batch_sample sorts per pass (a pass's scratch is ~2 MB per row at a 128k vocabulary).
constexpr int kSampleRowsPerPass = 64;

}  // namespace

CudaSampling::CudaSampling(int max_rows, int vocab, DeviceArena& arena)
    : max_rows_(max_rows), vocab_(vocab) {
  scratch_bytes_ =
      kernels::batch_sample_scratch_bytes(std::min(max_rows_, kSampleRowsPerPass), vocab_);
  scratch_ = arena.alloc(scratch_bytes_);
  params_ = arena.alloc(size_t(max_rows_) * sizeof(kernels::SampleRowParams));
  offsets_ = arena.alloc(size_t(max_rows_ + 1) * 4);
  tokens_ = arena.alloc(size_t(max_rows_) * 4);
  logprobs_ = arena.alloc(size_t(max_rows_) * 4);
  host_params_ = PinnedBuffer(size_t(max_rows_) * sizeof(kernels::SampleRowParams) +
                              size_t(max_rows_ + 1) * 4);
  host_results_ = PinnedBuffer(size_t(max_rows_) * 8);
}

std::vector<SampleResult> CudaSampling::sample(std::span<const SampleRequest> requests,
                                               std::span<const int> entry_row, const float* logits,
                                               cudaStream_t st) {
  const int R = int(requests.size());
  if (R == 0) return {};
  if (R > max_rows_)
    throw std::runtime_error("sample: " + std::to_string(R) + " requests, at most " +
                             std::to_string(max_rows_));
  // Row r of the sampled logits must be request r's: one pass over all rows when the requests
  // name the logits rows 0, 1, 2, ... in order (the engine's case), else one row at a time.
  bool in_order = true;
  for (int r = 0; r < R; ++r) {
    const int e = requests[r].entry;
    if (e < 0 || e >= int(entry_row.size()) || entry_row[e] < 0)
      throw std::runtime_error("sample: batch entry " + std::to_string(e) +
                               " has no logits: it did not ask for them in the last forward");
    in_order = in_order && entry_row[e] == r;
  }

  // Parameters and seen tokens (only rows with a repetition penalty need theirs).
  size_t seen_total = 0;
  for (const SampleRequest& q : requests)
    if (q.params.repetition_penalty != 1.0f) seen_total += q.seen.size();
  if (seen_total > seen_capacity_) {
    seen_capacity_ = std::max(seen_total, 2 * seen_capacity_);
    seen_ = DeviceBuffer(seen_capacity_ * 4);
    host_seen_ = PinnedBuffer(seen_capacity_ * 4);
  }
  auto* params = host_params_.get<kernels::SampleRowParams>();
  int* offsets = reinterpret_cast<int*>(params + max_rows_);
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
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(params_.get(), params,
                                    size_t(R) * sizeof(kernels::SampleRowParams),
                                    cudaMemcpyHostToDevice, st));
  if (at > 0) {
    HEARTH_CUDA_CHECK(
        cudaMemcpyAsync(offsets_.get(), offsets, size_t(R + 1) * 4, cudaMemcpyHostToDevice, st));
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(seen_.get(), seen, at * 4, cudaMemcpyHostToDevice, st));
  }
  kernels::BatchSampleArgs a;
  a.vocab = vocab_;
  a.scratch = scratch_.get(), a.scratch_bytes = scratch_bytes_;
  auto run = [&](int r0, int rows, int logits_row) {
    a.logits = logits + size_t(logits_row) * vocab_, a.rows = rows;
    a.params = params_.get<kernels::SampleRowParams>() + r0;
    if (at > 0)  // offsets index the whole seen list, so a row's slice works alone
      a.seen_offsets = offsets_.get<int>() + r0, a.seen_tokens = seen_.get<int32_t>();
    a.tokens = tokens_.get<int32_t>() + r0, a.logprobs = logprobs_.get<float>() + r0;
    kernels::batch_sample(a, st);
  };
  if (in_order)
    run(0, R, 0);
  else
    for (int r = 0; r < R; ++r) run(r, 1, entry_row[requests[r].entry]);
  int32_t* out_tokens = host_results_.get<int32_t>();
  float* out_logprobs = reinterpret_cast<float*>(out_tokens + max_rows_);
  HEARTH_CUDA_CHECK(
      cudaMemcpyAsync(out_tokens, tokens_.get(), size_t(R) * 4, cudaMemcpyDeviceToHost, st));
  HEARTH_CUDA_CHECK(
      cudaMemcpyAsync(out_logprobs, logprobs_.get(), size_t(R) * 4, cudaMemcpyDeviceToHost, st));
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(st));

  std::vector<SampleResult> results(R);
  for (int r = 0; r < R; ++r) {
    results[r].token = out_tokens[r];
    results[r].logprob = out_logprobs[r];
  }
  return results;
}

}  // namespace hearth
