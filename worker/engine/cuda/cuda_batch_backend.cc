#include "worker/engine/cuda/cuda_batch_backend.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "worker/engine/logprobs.h"

namespace hearth {

namespace {

// What the batched kernels take, refused before anything is allocated; returns the context.
int checked_context(const WeightStore& store, const EngineOptions& options, int context) {
  const ModelConfig& c = store.config();
  if (store.residence() != Residence::Device)
    throw std::runtime_error("the cuda backend needs GPU-resident weights");
  const int hd = c.head_dim;
  if (hd != 16 && hd != 32 && hd != 64 && hd != 128)
    throw std::runtime_error("the batched cuda backend supports head_dim 16, 32, 64 or 128, not " +
                             std::to_string(hd));
  if (c.n_heads % c.n_kv_heads != 0 || c.n_heads / c.n_kv_heads > 64)
    throw std::runtime_error("the batched cuda backend supports GQA groups of at most 64 heads");
  for (auto [what, k] : {std::pair{"hidden_size", c.hidden},
                         {"q_dim", c.q_dim()},
                         {"intermediate_size", c.intermediate}})
    if (k % 16 != 0)
      throw std::runtime_error(std::string("the batched cuda backend needs ") + what +
                               " to be a multiple of 16, not " + std::to_string(k));
  if (options.kv_block_size <= 0)
    throw std::runtime_error("kv_block_size must be positive, got " +
                             std::to_string(options.kv_block_size));
  if (context < 1) throw std::runtime_error("context_length must be positive");
  // One GPU here; make_backend gives tensor_parallel > 1 to CudaTpBackend (cuda_tp_backend.h).
  if (options.tensor_parallel > 1)
    throw std::runtime_error("the batched cuda backend runs one GPU; tensor_parallel " +
                             std::to_string(options.tensor_parallel) +
                             " runs through make_backend (CudaTpBackend), not this bench or path");
  return context;
}

CudaWeights bind_checked(const WeightStore& store, const EngineOptions& options) {
  CudaWeights w = CudaWeights::bind(store, store.config());
  w.check_kv_cache_dtype(options.kv_cache_dtype);
  return w;
}

}  // namespace

CudaBatchBackend::CudaBatchBackend(std::shared_ptr<const WeightStore> store,
                                   const EngineOptions& options, int context,
                                   const KvMemoryFactory& kv_memory)
    : store_(std::move(store)),
      c_(store_->config()),
      options_(options),
      context_(checked_context(*store_, options_, context)),
      limits_(StepLimits::of(options_, context_)),
      stream_(make_stream()),
      weights_(bind_checked(*store_, options_)),
      model_(c_, weights_, limits_, options_, context_, arena_, stream_.get()),
      inputs_(limits_, options_.kv_block_size, arena_),
      sampling_(limits_.max_seqs, c_.vocab, arena_),
      kv_(c_, options_, context_, stream_.get(), arena_, kv_memory) {
  arena_.count(weights_.copied_bytes());
}

CudaBatchBackend::~CudaBatchBackend() {
  if (stream_) cudaStreamSynchronize(stream_.get());
}

void CudaBatchBackend::synchronize() {
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void CudaBatchBackend::run_substep(const ForwardBatch& batch, const SubStep& step,
                                   int& logits_row) {
  inputs_.begin(logits_row);
  for (size_t e = step.first; e < step.last; ++e) {
    const int n = int(batch.entries[e].tokens.size());
    const int lo = e == step.first ? step.first_token : 0;
    const int hi = e + 1 == step.last ? step.last_token : n;
    const int row = inputs_.add(batch.entries[e], lo, hi);
    if (row >= 0) entry_row_[e] = row, logits_row = row + 1;
  }
  model_.launch(inputs_.upload(stream_.get()), inputs_, kv_, stream_.get());
}

// A decode step (decode_step_plan.h): padded to its bucket, run from the bucket's graph once
// one is captured.
void CudaBatchBackend::run_decode(const ForwardBatch& batch, const DecodeStepPlan& plan) {
  add_decode_rows(inputs_, batch, plan, entry_row_);
  StepShape shape = inputs_.upload(stream_.get());
  shape.max_kv_len = plan.kv_bound;  // the graph's bound, not this step's
  graphs_.run(plan.seqs, plan.kv_bound, stream_.get(),
              [&] { model_.launch(shape, inputs_, kv_, stream_.get()); });
}

void CudaBatchBackend::forward(const ForwardBatch& batch) {
  check_batch(batch);
  HEARTH_CUDA_CHECK(cudaEventRecord(step_begin_.get(), stream_.get()));
  step_timed_ = false;
  kv_.prepare(stream_.get());
  entry_row_.assign(batch.entries.size(), -1);
  host_logits_.assign(batch.entries.size(), {});
  if (const auto plan =
          plan_decode_step(batch, options_.cuda_graphs, limits_.max_step_seqs, context_))
    return run_decode(batch, *plan);
  int logits_row = 0;
  for (const SubStep& step : split_substeps(batch, limits_.max_tokens, limits_.max_step_seqs))
    run_substep(batch, step, logits_row);
}

void CudaBatchBackend::capture_decode_graphs(int max_kv_len) {
  // The capture runs its steps on block 0: a leased pool holding none yet captures later.
  if (!options_.cuda_graphs || kv_.shape().num_blocks == 0) return;
  kv_.prepare(stream_.get());
  capture_every_decode_bucket(
      max_kv_len, context_, kv_.shape().block_size, limits_.max_step_seqs,
      [&](const ForwardBatch& batch) { forward(batch); },
      [&](int seqs, int kv_bound) { return graphs_.captured(seqs, kv_bound); });
  synchronize();
}

std::span<const float> CudaBatchBackend::logits(int entry) {
  if (entry < 0 || entry >= int(entry_row_.size()) || entry_row_[entry] < 0)
    throw std::runtime_error("batch entry " + std::to_string(entry) +
                             " has no logits: it did not ask for them in the last forward");
  std::vector<float>& host = host_logits_[entry];
  if (host.empty()) {
    host.resize(c_.vocab);
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(host.data(), model_.logits(entry_row_[entry]),
                                      size_t(c_.vocab) * 4, cudaMemcpyDeviceToHost, stream_.get()));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }
  return host;
}

std::vector<SampleResult> CudaBatchBackend::sample(std::span<const SampleRequest> requests) {
  // The engine publishes a step's full blocks to other workers once sample() returned, so
  // their keys and values must be written by then, and a failed step known: a sampling step
  // waits for the stream anyway; a step of prompt chunks alone waits here when sharing.
  if (requests.empty()) {
    if (kv_.shares()) synchronize();
    return {};
  }
  // Structured output: masked in place, so the sampler and top_logprobs both see it. The
  // logits buffer is this backend's own, rewritten by every forward.
  token_mask_.apply(requests, entry_row_, const_cast<float*>(model_.logits(0)), stream_.get());
  // top_logprobs too come from the device: no logits row crosses to the host.
  std::vector<SampleResult> results =
      sampling_.sample(requests, entry_row_, model_.logits(0), stream_.get(), step_end_.get());
  step_timed_ = true;
  return results;
}

void CudaBatchBackend::profile_forward(const ForwardBatch& batch,
                                       std::array<double, StepPhases::kPhases>& ms) {
  const bool graphs = options_.cuda_graphs;
  options_.cuda_graphs = false;
  phases_.begin(stream_.get());
  model_.set_phases(&phases_);
  try {
    forward(batch);
  } catch (...) {
    options_.cuda_graphs = graphs;
    model_.set_phases(nullptr);
    throw;
  }
  options_.cuda_graphs = graphs;
  model_.set_phases(nullptr);
  phases_.finish(ms);
}

double CudaBatchBackend::last_step_device_ms() {
  if (!step_timed_) return -1;
  float ms = 0;
  HEARTH_CUDA_CHECK(cudaEventSynchronize(step_end_.get()));
  HEARTH_CUDA_CHECK(cudaEventElapsedTime(&ms, step_begin_.get(), step_end_.get()));
  return ms;
}

}  // namespace hearth
