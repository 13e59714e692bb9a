// Tensor parallelism on the GPU, one process driving N GPUs (issue 26): an intermediate to the
// issue's process-per-GPU design. Rank r runs on GPU r with its pieces of the model (cut by
// ShardPlan from the loaded model and uploaded there), its own KV pool holding its KV heads
// only, its own activations, step inputs and stream. A forward runs rank by rank, layer by
// layer: each rank's o_proj and down (and embedding) partials are summed over the ranks by the
// fixed-order all-reduce (kernels/peer_all_reduce.h), so every rank holds the same residual
// bits; the LM head runs by vocabulary, the ranks' logits gathered into rank 0's rows, where
// sampling and token masks run as in the batched backend. Decode steps are captured per bucket
// as the batched backend's are, one graph per rank (cuda_graphs); everything else runs eagerly.
// Each rank's state and forward is a CudaTpRankUnit (cuda_tp_rank.h), the unit a rank in a
// process of its own owns alone. An fp8 model (issue 25) runs each rank's fp8 pieces with the
// batched engine's W8A8 matmuls: q/k/v and gate/up with their rows' scales, o and down with the
// whole per-channel vector, each rank quantizing its own slice of their input (as the CPU ranks
// do). A served model's ranks (the server's pieces) run as they are. Served, each rank's pool is
// leased from the server's budget for that rank's GPU (kv_lease with its device), the ranks'
// leases grown and shrunk together as one RankedKvMemory (the engine's kv_memory); otherwise
// the pools are sized here.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <span>
#include <vector>

#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"
#include "kernels/peer_all_reduce.h"
#include "weight-server/model/weight_store.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda/cuda_llama_forward.h"
#include "worker/engine/cuda/cuda_memory_plan.h"
#include "worker/engine/cuda/cuda_sampling.h"
#include "worker/engine/cuda/cuda_token_mask.h"
#include "worker/engine/cuda/cuda_tp_rank.h"
#include "worker/engine/cuda/cuda_weights.h"
#include "worker/engine/cuda/decode_graphs.h"
#include "worker/engine/cuda/decode_step_plan.h"
#include "worker/engine/cuda/device_rank_store.h"
#include "worker/engine/cuda/step_inputs.h"
#include "worker/engine/engine_options.h"

namespace hearth {

class CudaTpBackend final : public Backend {
 public:
  // `whole` is the host-resident model; options.tensor_parallel GPUs, 0..N-1, are used. Throws
  // naming the cause: too few GPUs, a count that does not divide (ShardPlan), no peer access.
  CudaTpBackend(const WeightStore& whole, const EngineOptions& options, int context_length);
  // A model a server sharded: ranks[r] holds exactly rank r's pieces, either GPU-resident (vmm:
  // rank r runs on the GPU holding them) or on the host (memfd: uploaded to GPU r).
  // options.tensor_parallel must be ranks.size(). With `kv_memory` (served), rank r's pool is
  // what kv_memory(..., r) leases.
  CudaTpBackend(std::vector<std::shared_ptr<const WeightStore>> ranks, const EngineOptions& options,
                int context_length, const KvMemoryFactory& kv_memory = nullptr);
  ~CudaTpBackend() override;
  CudaTpBackend(const CudaTpBackend&) = delete;
  CudaTpBackend& operator=(const CudaTpBackend&) = delete;

  std::string name() const override { return "cuda"; }
  int context_length() const override { return context_; }
  int vocab_size() const override { return c_.vocab; }
  KvPoolShape kv_pool() const override;
  KvMemory* kv_memory() override { return leased_.get(); }
  int max_sequences() const override { return limits_.max_seqs; }

  void forward(const ForwardBatch& batch) override;
  std::span<const float> logits(int entry) override;
  std::vector<SampleResult> sample(std::span<const SampleRequest> requests) override;

  int ranks() const { return int(ranks_.size()); }
  void synchronize();
  // As CudaBatchBackend::capture_decode_graphs: every decode bucket's graphs (one per rank)
  // captured up front, for keys of up to max_kv_len positions, so that no step pauses for one.
  // Its steps write block 0 of every rank's pool: nothing may be using the pools yet.
  void capture_decode_graphs(int max_kv_len);

 private:
  // Builds every rank: pieces(r) gives rank r's GPU-resident pieces on devices[r].
  void build(const std::vector<int>& devices,
             const std::function<std::shared_ptr<const WeightStore>(int)>& pieces,
             const KvMemoryFactory& kv_memory = nullptr);
  void run_substep(const ForwardBatch& batch, const SubStep& step, int& logits_row);
  void run_decode(const ForwardBatch& batch, const DecodeStepPlan& plan);
  // Each rank's inputs to its GPU; kv_bound > 0 replaces max_kv_len (a decode graph's bound).
  std::vector<StepShape> upload_inputs(int kv_bound);
  void launch_eager(const std::vector<StepShape>& shapes);
  void gather_logits(const StepShape& shape);

  ModelConfig c_;
  EngineOptions options_;
  int context_;
  StepLimits limits_;
  std::unique_ptr<kernels::PeerAllReduce> all_reduce_;
  std::vector<std::unique_ptr<CudaTpRankUnit>> ranks_;
  KvPoolShape kv_shape_{};
  // Served: every rank's leased pool, grown together; null when the pools are sized here.
  std::shared_ptr<KvMemory> leased_;
  // On rank 0: the gathered logits of a forward, [max_seqs][vocab], sampling and masks.
  DeviceBuffer logits_;
  std::unique_ptr<CudaSampling> sampling_;
  std::unique_ptr<CudaTokenMask> token_mask_;
  CudaEvent step_start_;
  // Eager runs so far per decode bucket (sequences, key-length bound); each rank holds its
  // graphs.
  std::map<std::pair<int, int>, int> eager_runs_;
  std::vector<int> entry_row_;
  std::vector<std::vector<float>> host_logits_;
};

}  // namespace hearth
