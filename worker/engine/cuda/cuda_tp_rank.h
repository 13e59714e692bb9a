// One tensor-parallel rank on its own GPU (issue 26): its pieces bound, its forward, step
// inputs, KV pool (its KV heads only) and stream, and its decode graphs per bucket. The
// in-process backend (cuda_tp_backend.h) keeps one per GPU and interleaves them part by part;
// a rank that is a process of its own owns one alone. How the ranks meet is the caller's: the
// all-reduce it is given (the in-process group, or worker/engine/cuda/process_all_reduce.h).
// Every call makes the rank's device current for its duration.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <utility>

#include "kernels/cuda_handles.h"
#include "weight-server/model/shard_plan.h"
#include "weight-server/model/weight_store.h"
#include "worker/engine/cuda/cuda_llama_forward.h"
#include "worker/engine/cuda/cuda_memory_plan.h"
#include "worker/engine/cuda/cuda_weights.h"
#include "worker/engine/cuda/step_inputs.h"
#include "worker/engine/engine_options.h"

namespace hearth {

class CudaTpRankUnit {
 public:
  using AllReduce = decltype(CudaTpRank::all_reduce);
  using Part = CudaLlamaForward::LayerPart;
  // A decode bucket: (sequences, key-length bound).
  using GraphKey = std::pair<int, int>;

  // Rank `rank` of `plan` on `device`, `store` its pieces there (GPU-resident). Binds them and
  // builds the forward and step inputs; the KV pool comes later (make_kv_pool), after whatever
  // else the caller allocates on this GPU. Throws naming the rank when its shapes do not fit.
  CudaTpRankUnit(int rank, int device, const ModelConfig& whole, const ShardPlan& plan,
                 std::shared_ptr<const WeightStore> store, const EngineOptions& options,
                 int context_length, const StepLimits& limits, AllReduce all_reduce);
  ~CudaTpRankUnit();
  CudaTpRankUnit(const CudaTpRankUnit&) = delete;
  CudaTpRankUnit& operator=(const CudaTpRankUnit&) = delete;

  // The pool by `options`' KV policy (its kv_pool_* settings); the last allocation on the GPU.
  // With `lease` (served), the memory lease(..., rank()) makes on this rank's device.
  void make_kv_pool(const EngineOptions& options, int context_length,
                    const KvMemoryFactory& lease = nullptr);

  int rank() const { return rank_; }
  int device() const { return device_; }
  const ModelConfig& config() const { return config_; }
  int vocab_begin() const { return vocab_begin_; }
  int vocab_end() const { return vocab_end_; }
  cudaStream_t stream() const { return stream_.get(); }
  DeviceArena& arena() { return arena_; }
  StepInputs& inputs() { return *inputs_; }
  CudaKvPool& kv() { return *kv_; }

  // The sub-step's inputs to the GPU; kv_bound > 0 replaces max_kv_len (a decode graph's bound).
  StepShape upload_inputs(int kv_bound);
  // The forward in parts (CudaLlamaForward::begin, run_layer, finish), or whole.
  void begin(const StepShape& shape);
  void run_layer(int layer, Part part, const StepShape& shape);
  void finish(const StepShape& shape);
  void launch(const StepShape& shape);

  // Decode graphs: the whole forward of one bucket captured on this rank's stream, replayed.
  bool has_graph(const GraphKey& key) const { return graphs_.contains(key); }
  void capture_graph(const GraphKey& key, const StepShape& shape);
  void replay_graph(const GraphKey& key);

  // This rank's vocabulary columns of the sub-step's logits rows into `whole` ([rows][vocab]
  // floats, any GPU's memory this device reaches), on this rank's stream; then records done().
  void copy_logits(float* whole, int vocab, const StepShape& shape);
  cudaEvent_t done() const { return done_.get(); }

 private:
  int rank_ = 0, device_ = 0;
  ModelConfig config_;  // the rank's heads, channels and vocabulary rows
  int vocab_begin_ = 0, vocab_end_ = 0;
  CudaStream stream_;
  std::shared_ptr<const WeightStore> store_;  // on device_
  CudaWeights weights_;
  DeviceArena arena_;
  std::unique_ptr<CudaLlamaForward> model_;
  std::unique_ptr<StepInputs> inputs_;
  std::unique_ptr<CudaKvPool> kv_;
  CudaEvent done_;
  std::map<GraphKey, CudaGraphExec> graphs_;
};

// The GPUs options.tensor_parallel asks for, checked: 2..kMaxAllReduceRanks, no more than are
// present, on the batched cuda engine (throws naming what does not fit).
int checked_gpu_ranks(const EngineOptions& options);
// A store of rank `rank`'s pieces from elsewhere (a server cut them): checks that it holds
// exactly the shapes `plan` gives that rank (the error names the rank and tensor), and returns
// the GPU they live on, or -1 when they are host-resident (memfd: to be uploaded).
int served_rank_device(const WeightStore& store, const ShardPlan& plan, int rank);
// Rank `rank`'s pieces of `plan`, cut from the host-resident `whole` and uploaded to `device`.
std::shared_ptr<const WeightStore> upload_rank_pieces(const WeightStore& whole,
                                                      const ShardPlan& plan, int rank, int device);

}  // namespace hearth
