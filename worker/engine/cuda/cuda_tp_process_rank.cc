#include "worker/engine/cuda/cuda_tp_process_rank.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/device_scope.h"
#include "weight-server/model/shard_plan.h"
#include "worker/engine/cuda/decode_step_plan.h"

namespace hearth {

using kernels::DeviceScope;

CudaTpProcessRank::CudaTpProcessRank(int rank, int device, const ModelConfig& whole,
                                     std::shared_ptr<const WeightStore> pieces,
                                     const EngineOptions& options, int context_length,
                                     int kv_blocks, const KvMemoryFactory& lease)
    : c_(whole),
      options_(options),
      context_(context_length),
      limits_(StepLimits::of(options, context_length)) {
  if (options_.kv_block_size <= 0)
    throw std::runtime_error("kv_block_size must be positive, got " +
                             std::to_string(options_.kv_block_size));
  if (context_ < 1) throw std::runtime_error("context_length must be positive");
  const int n = options_.tensor_parallel;
  const ShardPlan plan = ShardPlan::make(c_, n);
  DeviceScope scope(device);
  all_reduce_ =
      std::make_unique<ProcessAllReduce>(rank, n, device, int64_t(limits_.max_tokens) * c_.hidden);
  ProcessAllReduce* ar = all_reduce_.get();
  unit_ = std::make_unique<CudaTpRankUnit>(
      rank, device, c_, plan, std::move(pieces), options_, context_, limits_,
      [ar](const float* partial, float* x, int64_t count, bool accumulate,
           const kernels::AllReduceNorm* norm,
           cudaStream_t stream) { return ar->run(partial, x, count, accumulate, stream, norm); });
  logits_ = unit_->arena().alloc(size_t(limits_.max_seqs) * c_.vocab * 4);
  if (rank == 0) {
    sampling_ = std::make_unique<CudaSampling>(limits_.max_seqs, c_.vocab, unit_->arena());
    token_mask_ = std::make_unique<CudaTokenMask>(c_.vocab);
  }
  if (lease) {
    unit_->make_kv_pool(options_, context_, lease);
  } else {
    EngineOptions o = options_;
    if (kv_blocks > 0) {
      o.kv_pool_tokens = int64_t(kv_blocks) * options_.kv_block_size;
      o.kv_pool_gb = 0;
      o.kv_pool_fraction = 0;
    }
    unit_->make_kv_pool(o, context_);
    const int blocks = unit_->kv().shape().num_blocks;
    if (kv_blocks > 0 && blocks != kv_blocks)
      throw std::runtime_error("tensor parallel rank " + std::to_string(rank) +
                               "'s KV pool holds " + std::to_string(blocks) + " blocks, rank 0's " +
                               std::to_string(kv_blocks));
  }
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(unit_->stream()));
}

CudaTpProcessRank::~CudaTpProcessRank() {
  if (unit_) cudaStreamSynchronize(unit_->stream());
}

void CudaTpProcessRank::gather_logits(const StepShape& s) {
  if (s.rows == 0) return;  // the same on every rank: the plan is
  DeviceScope scope(unit_->device());
  float* rows = logits_.get<float>() + size_t(s.logits_row) * c_.vocab;
  const int64_t count = int64_t(s.rows) * c_.vocab;
  HEARTH_CUDA_CHECK(cudaMemsetAsync(rows, 0, size_t(count) * 4, unit_->stream()));
  unit_->copy_logits(logits_.get<float>(), c_.vocab, s);
  // In place: each element's partial is read before the barrier its sum is written after.
  for (int64_t at = 0; at < count; at += all_reduce_->max_floats()) {
    const int64_t n = std::min(all_reduce_->max_floats(), count - at);
    all_reduce_->run(rows + at, rows + at, n, /*accumulate=*/false, unit_->stream());
  }
}

void CudaTpProcessRank::forward(const ForwardBatch& batch) {
  DeviceScope scope(unit_->device());
  unit_->kv().prepare(unit_->stream());
  entry_row_.assign(batch.entries.size(), -1);
  if (const auto plan =
          plan_decode_step(batch, options_.cuda_graphs, limits_.max_step_seqs, context_)) {
    add_decode_rows(unit_->inputs(), batch, *plan, entry_row_);
    const StepShape shape = unit_->upload_inputs(plan->kv_bound);
    const std::pair key{plan->seqs, plan->kv_bound};
    if (!unit_->has_graph(key)) {
      if (eager_runs_[key]++ == 0) {
        unit_->launch(shape);
        return gather_logits(shape);
      }
      unit_->capture_graph(key, shape);
    }
    unit_->replay_graph(key);
    return gather_logits(shape);
  }
  int logits_row = 0;
  for (const SubStep& step : split_substeps(batch, limits_.max_tokens, limits_.max_step_seqs)) {
    unit_->inputs().begin(logits_row);
    for (size_t e = step.first; e < step.last; ++e) {
      const int n = int(batch.entries[e].tokens.size());
      const int lo = e == step.first ? step.first_token : 0;
      const int hi = e + 1 == step.last ? step.last_token : n;
      const int row = unit_->inputs().add(batch.entries[e], lo, hi);
      if (row >= 0) entry_row_[e] = row, logits_row = row + 1;
    }
    const StepShape shape = unit_->upload_inputs(0);
    unit_->launch(shape);
    gather_logits(shape);
  }
}

}  // namespace hearth
