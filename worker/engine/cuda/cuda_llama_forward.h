// The batched CUDA forward of a Llama-family model: the one forward of the batched backend.
// It runs the batch-invariant kernels of kernels/batch_ops.h, so a sequence's logits are
// bit-identical whatever else shares its steps, wherever it sits in them, and however its
// prompt was chunked. One sub-step runs as:
//   embedding -> per layer: rmsnorm, q/k/v projections (fp32), paged_kv_write (bias, head norm,
//   RoPE, k/v into the pool), paged_attention, o_proj accumulated into the residual, rmsnorm,
//   gate/up with SwiGLU fused, down accumulated -> the rows that want logits gathered, final
//   norm, lm_head.
// An fp8 model quantizes each projection input per row once (the rmsnorm output for q/k/v and
// again for gate/up, the attention output for o, the SwiGLU output for down) and runs the fp8
// matmul with the same epilogues; its LM head stays 16-bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "kernels/all_reduce.h"
#include "kernels/batch_ops.h"
#include "kernels/device_buffer.h"
#include "weight-server/model/model_config.h"
#include "worker/engine/cuda/cuda_matmuls.h"
#include "worker/engine/cuda/cuda_memory_plan.h"
#include "worker/engine/cuda/cuda_weights.h"
#include "worker/engine/cuda/step_inputs.h"
#include "worker/engine/cuda/step_phases.h"
#include "worker/engine/engine_options.h"

namespace hearth {

// One tensor-parallel rank's part in a forward (issue 26), when the forward runs a rank's pieces
// (its config has the rank's heads, channels and vocabulary rows): the embedding looks up only
// the rows this rank holds (zeros elsewhere) and o_proj, down and that embedding are summed over
// the ranks by `all_reduce` instead of accumulated in place. Each all-reduce is the last launch
// of a part (begin(), a layer's attention part, its MLP part): a driver enqueues one part on every
// rank before the next part on any, so no rank's queue waits behind a peer's all-reduce that the
// host has not launched yet (loading a kernel lazily may wait for the device's running kernels).
// On 16-bit weights every all-reduce but the last layer's is given the rmsnorm that follows it
// (`norm`: the layer's MLP norm, or the next layer's input norm) and, where it writes it (one
// shot), that norm has no launch of its own; where not, the norm stays the first launch of the
// next part, as above. fp8 models keep their separate rmsnorm_quantize.
struct CudaTpRank {
  int vocab_begin = 0, vocab_end = 0;
  // x = (accumulate ? x : 0) + the ranks' `partial`s summed in rank order, `count` floats; with
  // `norm`, returns whether the launch also wrote rmsnorm of x's rows into norm->out
  // (kernels::AllReduceGroup::run); if not, the caller norms in its next part.
  std::function<bool(const float* partial, float* x, int64_t count, bool accumulate,
                     const kernels::AllReduceNorm* norm, cudaStream_t stream)>
      all_reduce;
};

class CudaLlamaForward {
 public:
  // A layer up to o_proj (and its all-reduce), the rest from the MLP norm, or both.
  enum class LayerPart { Attention, Mlp, Both };

  // Activations for one sub-step of `limits`, and the logits of a whole forward (max_seqs rows).
  // Tunes the matmuls when options.matmul_tiling is Tuned. `weights` must outlive this.
  CudaLlamaForward(const ModelConfig& config, const CudaWeights& weights, const StepLimits& limits,
                   const EngineOptions& options, int context_length, DeviceArena& arena,
                   cudaStream_t stream, std::optional<CudaTpRank> tp = std::nullopt);

  // Enqueues every kernel of one sub-step on `stream`: its inputs already on the device, its
  // keys and values written to `kv`, its logits to rows [shape.logits_row, + shape.rows).
  void launch(const StepShape& shape, const StepInputs& inputs, const CudaKvPool& kv,
              cudaStream_t stream);
  // launch() in three parts, so that tensor-parallel ranks can be interleaved layer by layer
  // (each rank's all-reduces wait for its peers'): the embedding and attention plan, one layer,
  // then the LM head.
  void begin(const StepShape& shape, const StepInputs& inputs, const CudaKvPool& kv,
             cudaStream_t stream);
  void run_layer(int l, LayerPart part, const StepShape& shape, const StepInputs& inputs,
                 const CudaKvPool& kv, cudaStream_t stream) {
    layer(l, shape, inputs, kv, attention_, stream, part);
  }
  void finish(const StepShape& shape, const StepInputs& inputs, cudaStream_t stream);

  const float* logits(int row) const { return logits_.get<float>() + size_t(row) * config_.vocab; }
  const TilingTable& matmul_tiling() const { return matmuls_.tiling(); }
  // Marks each phase's end on `phases` while set (eager steps only: never while capturing).
  void set_phases(StepPhases* phases) { phases_ = phases; }

 private:
  void layer(int l, const StepShape& shape, const StepInputs& inputs, const CudaKvPool& kv,
             const kernels::PagedAttentionArgs& attention, cudaStream_t stream,
             LayerPart part = LayerPart::Both);

  const ModelConfig& config_;
  const CudaWeights& weights_;
  // Whether the all-reduces write the norms after them (CudaTpRank), and the norm they would.
  bool tp_fuses_norm() const;
  kernels::AllReduceNorm tp_norm(const float* weight) const;

  kernels::Half type_;
  // x: the residual (fp32); xgn: the rows that want logits, normed (one gathering launch).
  DeviceBuffer x_, xn_, q32_, k32_, v32_, q16_, att_, act_, xgn_, logits_;
  CudaMatmuls matmuls_;
  size_t attention_scratch_bytes_ = 0;
  DeviceBuffer attention_scratch_;
  kernels::PagedAttentionArgs attention_{};  // begin()'s plan, for the layers
  std::optional<CudaTpRank> tp_;
  // Whether the last all-reduce wrote xn_ (the norm the next part begins with); set by every
  // tensor-parallel all-reduce, read by the part after it in the same step.
  bool xn_from_all_reduce_ = false;
  DeviceBuffer partial_;  // tensor parallel: this rank's o_proj / down / embedding partial
  StepPhases* phases_ = nullptr;
  void mark(StepPhase phase, cudaStream_t stream) {
    if (phases_) phases_->mark(phase, stream);
  }
};

}  // namespace hearth
