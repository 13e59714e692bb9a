// One tensor-parallel rank that is a process of its own on its own GPU (issue 26,
// tensor_parallel_processes with the cuda backend): its CudaTpRankUnit, its side of the
// all-reduce across processes (process_all_reduce.h) and the forward of one step plan, exactly
// as the in-process backend runs it for this rank (the same sub-steps, decode buckets, graphs
// captured on the second run of a bucket). The leader and every follower run the same plans in
// the same order, so their all-reduce calls pair up one for one.
//
// The vocabulary-parallel logits reach every rank through the same all-reduce: each rank zeroes
// the step's rows, writes its own columns, and the rows are summed in rank order. Every column
// is one rank's value plus zeros, which is that value exactly (a -0 comes back +0): rank 0
// samples the in-process backend's logits with no other cross-process signal, and the step's
// completion is ordered on each rank's own stream.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/device_buffer.h"
#include "weight-server/model/weight_store.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda/cuda_sampling.h"
#include "worker/engine/cuda/cuda_token_mask.h"
#include "worker/engine/cuda/cuda_tp_rank.h"
#include "worker/engine/cuda/process_all_reduce.h"
#include "worker/engine/engine_options.h"

namespace hearth {

class CudaTpProcessRank {
 public:
  // Rank `rank` of options.tensor_parallel on `device`; `pieces` its pieces on that GPU.
  // kv_blocks > 0 sizes the KV pool exactly (the followers: rank 0's count), 0 by the engine's
  // KV policy from what the GPU has free (rank 0). The all-reduce's peers are imported later
  // (all_reduce().import_peer); forward() needs them all. Rank 0 also samples: its sampling
  // and token masks are allocated ahead of its KV pool, as the in-process backend's are.
  // With `lease` (served, a vmm server), the pool is what lease(..., rank) leases on this
  // rank's GPU, as the in-process backend leases each rank's (kv_blocks is then unused), and
  // kv_memory() is that lease.
  CudaTpProcessRank(int rank, int device, const ModelConfig& whole,
                    std::shared_ptr<const WeightStore> pieces, const EngineOptions& options,
                    int context_length, int kv_blocks, const KvMemoryFactory& lease = nullptr);
  ~CudaTpProcessRank();
  CudaTpProcessRank(const CudaTpProcessRank&) = delete;
  CudaTpProcessRank& operator=(const CudaTpProcessRank&) = delete;

  ProcessAllReduce& all_reduce() { return *all_reduce_; }
  // Leased: this rank's blocks now; else the pool's fixed size.
  KvPoolShape kv_pool() const { return unit_->kv().shape(); }
  KvMemory* kv_memory() const { return unit_->kv().memory(); }
  const StepLimits& limits() const { return limits_; }
  CudaTpRankUnit& unit() { return *unit_; }
  int device() const { return unit_->device(); }
  cudaStream_t stream() const { return unit_->stream(); }

  // The step plan's forward on this rank, enqueued on its stream: afterwards the rows of the
  // entries that asked hold the whole vocabulary's logits (logits(), entry_rows()).
  void forward(const ForwardBatch& batch);
  float* logits() const { return logits_.get<float>(); }
  CudaSampling& sampling() { return *sampling_; }       // rank 0
  CudaTokenMask& token_mask() { return *token_mask_; }  // rank 0
  const std::vector<int>& entry_rows() const { return entry_row_; }
  // Every decode bucket captured ahead (CudaTpBackend::capture_decode_graphs), given the
  // forward that runs a plan on every rank.
  bool has_graph(int seqs, int kv_bound) const { return unit_->has_graph({seqs, kv_bound}); }

 private:
  void gather_logits(const StepShape& shape);

  ModelConfig c_;
  EngineOptions options_;
  int context_;
  StepLimits limits_;
  std::unique_ptr<ProcessAllReduce> all_reduce_;
  std::unique_ptr<CudaTpRankUnit> unit_;
  DeviceBuffer logits_;  // [max_seqs][vocab]
  std::unique_ptr<CudaSampling> sampling_;
  std::unique_ptr<CudaTokenMask> token_mask_;
  std::map<std::pair<int, int>, int> eager_runs_;
  std::vector<int> entry_row_;
};

}  // namespace hearth
