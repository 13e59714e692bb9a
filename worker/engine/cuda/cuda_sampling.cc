#include "worker/engine/cuda/cuda_sampling.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/batch_ops.h"
#include "kernels/cuda_check.h"
#include "worker/engine/sampler.h"

namespace hearth {

CudaSampling::CudaSampling(int max_rows, int vocab, DeviceArena& arena)
    : max_rows_(max_rows), vocab_(vocab) {
  params_ = arena.alloc(size_t(max_rows_) * sizeof(kernels::SampleRowParams));
  offsets_ = arena.alloc(size_t(max_rows_ + 1) * 4);
  tokens_ = arena.alloc(size_t(max_rows_) * 4);
  logprobs_ = arena.alloc(size_t(max_rows_) * 4);
  top_tokens_ = arena.alloc(size_t(max_rows_) * kernels::kMaxSampleTopLogprobs * 4);
  top_logprobs_ = arena.alloc(size_t(max_rows_) * kernels::kMaxSampleTopLogprobs * 4);
  host_params_ = PinnedBuffer(size_t(max_rows_) * sizeof(kernels::SampleRowParams) +
                              size_t(max_rows_ + 1) * 4);
  host_results_ = PinnedBuffer(size_t(max_rows_) * (8 + 8 * kernels::kMaxSampleTopLogprobs));
}

std::vector<SampleResult> CudaSampling::sample(std::span<const SampleRequest> requests,
                                               std::span<const int> entry_row, const float* logits,
                                               cudaStream_t st, cudaEvent_t done) {
  const int R = int(requests.size());
  if (R == 0) {
    if (done) HEARTH_CUDA_CHECK(cudaEventRecord(done, st));
    return {};
  }
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

  // Parameters and token edits (only rows that edit logits have any).
  std::vector<std::vector<sampling_rules::TokenEdit>> row_edits(R);
  size_t edit_total = 0;
  int max_top = 0;
  for (int r = 0; r < R; ++r) {
    row_edits[r] = token_edits(requests[r].params, requests[r].seen, requests[r].step, vocab_);
    edit_total += row_edits[r].size();
    max_top = std::max(max_top, requests[r].top_logprobs);
  }
  if (edit_total > edit_capacity_) {
    edit_capacity_ = std::max(edit_total, 2 * edit_capacity_);
    edits_ = DeviceBuffer(edit_capacity_ * sizeof(sampling_rules::TokenEdit));
    host_edits_ = PinnedBuffer(edit_capacity_ * sizeof(sampling_rules::TokenEdit));
  }
  auto* params = host_params_.get<kernels::SampleRowParams>();
  int* offsets = reinterpret_cast<int*>(params + max_rows_);
  auto* edits = host_edits_.get<sampling_rules::TokenEdit>();
  size_t at = 0;
  for (int r = 0; r < R; ++r) {
    const SampleRequest& q = requests[r];
    kernels::SampleRowParams& p = params[r];
    p.seed = q.params.seed, p.step = q.step, p.temperature = q.params.temperature;
    p.top_p = q.params.top_p, p.min_p = q.params.min_p, p.penalty = q.params.repetition_penalty;
    p.top_k = q.params.top_k;
    p.frequency = q.params.frequency_penalty, p.presence = q.params.presence_penalty;
    p.top_logprobs = std::clamp(q.top_logprobs, 0, kernels::kMaxSampleTopLogprobs);
    offsets[r] = int(at);
    std::copy(row_edits[r].begin(), row_edits[r].end(), edits + at);
    at += row_edits[r].size();
  }
  offsets[R] = int(at);
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(params_.get(), params,
                                    size_t(R) * sizeof(kernels::SampleRowParams),
                                    cudaMemcpyHostToDevice, st));
  if (at > 0) {
    HEARTH_CUDA_CHECK(
        cudaMemcpyAsync(offsets_.get(), offsets, size_t(R + 1) * 4, cudaMemcpyHostToDevice, st));
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(edits_.get(), edits, at * sizeof(sampling_rules::TokenEdit),
                                      cudaMemcpyHostToDevice, st));
  }
  kernels::BatchSampleArgs a;
  a.vocab = vocab_;
  auto run = [&](int r0, int rows, int logits_row) {
    a.logits = logits + size_t(logits_row) * vocab_, a.rows = rows;
    a.params = params_.get<kernels::SampleRowParams>() + r0;
    if (at > 0)  // offsets index the whole edit list, so a row's slice works alone
      a.edit_offsets = offsets_.get<int>() + r0, a.edits = edits_.get<sampling_rules::TokenEdit>();
    a.tokens = tokens_.get<int32_t>() + r0, a.logprobs = logprobs_.get<float>() + r0;
    if (max_top > 0) {
      a.top_tokens = top_tokens_.get<int32_t>() + size_t(r0) * kernels::kMaxSampleTopLogprobs;
      a.top_logprobs = top_logprobs_.get<float>() + size_t(r0) * kernels::kMaxSampleTopLogprobs;
    }
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
  constexpr int kTop = kernels::kMaxSampleTopLogprobs;
  auto* out_top_tokens = reinterpret_cast<int32_t*>(out_logprobs + max_rows_);
  auto* out_top_logprobs = reinterpret_cast<float*>(out_top_tokens + size_t(max_rows_) * kTop);
  if (max_top > 0) {
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(out_top_tokens, top_tokens_.get(), size_t(R) * kTop * 4,
                                      cudaMemcpyDeviceToHost, st));
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(out_top_logprobs, top_logprobs_.get(), size_t(R) * kTop * 4,
                                      cudaMemcpyDeviceToHost, st));
  }
  if (done) HEARTH_CUDA_CHECK(cudaEventRecord(done, st));
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(st));

  std::vector<SampleResult> results(R);
  for (int r = 0; r < R; ++r) {
    // Non-finite logits leave the kernel's logprob NaN (and, all NaN, no token at all): the
    // step fails naming them, as the host sampler's does, before any id outside the
    // vocabulary reaches a request.
    check_device_sample({out_tokens[r], out_logprobs[r]}, vocab_, requests[r].step);
    results[r].token = out_tokens[r];
    results[r].logprob = out_logprobs[r];
    const int n = std::min(std::clamp(requests[r].top_logprobs, 0, kTop), vocab_);
    for (int i = 0; i < n; ++i)
      results[r].top.push_back(
          {out_top_tokens[size_t(r) * kTop + i], out_top_logprobs[size_t(r) * kTop + i]});
  }
  return results;
}

}  // namespace hearth
