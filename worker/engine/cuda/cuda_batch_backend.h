// The batched CUDA backend, the default GPU backend: one forward pass over every sequence of a
// step (decodes and prompt chunks together), their keys and values in a paged pool on the
// device, sampling for all rows at once on the GPU. A sequence's logits and tokens are
// bit-identical whatever else shares its steps, wherever it sits in them, and however its
// prompt was chunked (cuda_llama_forward.h).
//
// This class coordinates; each job has its own file:
//   cuda_memory_plan.h    step limits, the workspace count, the KV pool (sized last)
//   step_inputs.h         sub-steps of a batch, block tables and attention metadata
//   cuda_llama_forward.h  the model's layers over one sub-step (cuda_matmuls.h: the products)
//   decode_graphs.h       decode steps captured per bucket and replayed
//   cuda_sampling.h       sampling's marshalling
// Steps of more tokens than the activations hold are cut into sub-steps (chunked prefill gives
// the same bits). Decode steps (one token per sequence, each wanting logits) are padded to a
// bucket and replayed from its CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <vector>

#include "kernels/cuda_handles.h"
#include "weight-server/model/weight_store.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda/cuda_llama_forward.h"
#include "worker/engine/cuda/cuda_matmuls.h"
#include "worker/engine/cuda/cuda_memory_plan.h"
#include "worker/engine/cuda/cuda_sampling.h"
#include "worker/engine/cuda/cuda_token_mask.h"
#include "worker/engine/cuda/cuda_weights.h"
#include "worker/engine/cuda/decode_graphs.h"
#include "worker/engine/cuda/decode_step_plan.h"
#include "worker/engine/cuda/step_inputs.h"
#include "worker/engine/cuda/step_phases.h"
#include "worker/engine/engine_options.h"

namespace hearth {

class CudaBatchBackend final : public Backend {
 public:
  // `store` must be GPU-resident with 16-bit matrices. The KV pool takes kv_pool_tokens,
  // kv_pool_gb or kv_pool_fraction of the memory free once everything else is allocated
  // (default 0.9 of it), never more than max_running full contexts (resolve_kv_pool). With
  // `kv_memory` (served mode) the pool is leased instead and grows and shrinks with the work.
  CudaBatchBackend(std::shared_ptr<const WeightStore> store, const EngineOptions& options,
                   int context_length, const KvMemoryFactory& kv_memory = nullptr);
  ~CudaBatchBackend() override;
  CudaBatchBackend(const CudaBatchBackend&) = delete;
  CudaBatchBackend& operator=(const CudaBatchBackend&) = delete;

  std::string name() const override { return "cuda"; }
  int context_length() const override { return context_; }
  int vocab_size() const override { return c_.vocab; }
  KvPoolShape kv_pool() const override { return kv_.shape(); }
  int max_sequences() const override { return limits_.max_seqs; }
  KvMemory* kv_memory() override { return kv_.memory(); }

  void forward(const ForwardBatch& batch) override;
  std::span<const float> logits(int entry) override;
  std::vector<SampleResult> sample(std::span<const SampleRequest> requests) override;
  double last_step_device_ms() override;

  // Runs `batch` eagerly (no graph) with events between its kernels and adds each phase's
  // device milliseconds to `ms` (step_phases.h); the logits are left as forward() leaves them.
  void profile_forward(const ForwardBatch& batch, std::array<double, StepPhases::kPhases>& ms);

  // Bytes one token position takes in the pool (keys and values of every layer, 16-bit or
  // fp8 codes and scales).
  static int64_t kv_bytes_per_token(const ModelConfig& config,
                                    KvCacheDtype kv_dtype = KvCacheDtype::Auto) {
    return cuda_kv_bytes_per_token(config, kv_dtype);
  }

  // Device memory this backend allocated, excluding weights; the KV pool's share of it.
  size_t workspace_bytes() const { return arena_.bytes(); }
  size_t kv_pool_bytes() const { return kv_.bytes(); }
  int decode_graphs() const { return graphs_.size(); }
  void synchronize();

  // Captures the decode graphs of every sequence-count bucket up to max_sequences(), for keys
  // of up to max_kv_len positions, so that serving never pauses for a capture. It runs steps
  // that write block 0 of the pool: nothing may be using the pool yet (as forward_alone).
  void capture_decode_graphs(int max_kv_len);

  // batch_matmul's tiling table (cuda_matmuls.h).
  static constexpr int kMatmulShapes = hearth::kMatmulShapes;
  const TilingTable& matmul_tiling() const { return model_.matmul_tiling(); }

 private:
  void run_decode(const ForwardBatch& batch, const DecodeStepPlan& plan);
  void run_substep(const ForwardBatch& batch, const SubStep& step, int& logits_row);

  std::shared_ptr<const WeightStore> store_;
  const ModelConfig& c_;
  EngineOptions options_;
  int context_;
  StepLimits limits_;
  CudaStream stream_;  // declared before the buffers below: destroyed after them
  CudaWeights weights_;
  DeviceArena arena_;
  CudaLlamaForward model_;
  StepInputs inputs_;
  CudaSampling sampling_;
  CudaTokenMask token_mask_{c_.vocab};
  CudaKvPool kv_;  // last: it takes a share of what the others left free
  DecodeGraphs graphs_;

  // The last step's device time: recorded when forward() starts and when sample()'s copies
  // end; `step_timed_` once both are on the stream.
  CudaEvent step_begin_ = make_event(cudaEventDefault), step_end_ = make_event(cudaEventDefault);
  bool step_timed_ = false;
  StepPhases phases_;

  // The last forward: entry -> row of the logits (-1: none), and rows copied to the host.
  std::vector<int> entry_row_;
  std::vector<std::vector<float>> host_logits_;
};

}  // namespace hearth
