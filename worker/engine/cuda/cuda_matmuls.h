// The matrix products of a batched step: batch_matmul with a tiling per matrix and row-count
// band (tuned on the model's own weights when asked), or cuBLASLt when batch_invariant is off.
// An fp8 model's projections run kernels/fp8_matmul.h on an input quantized per row by
// kernels/fp8_quantize.h (once for every projection reading it), whatever batch_invariant says:
// there is no faster fp8 path to trade invariance for, and its bits do not depend on the batch.
// Its LM head stays 16-bit, on the path batch_invariant picks.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <span>

#include "kernels/batch_ops.h"
#include "kernels/device_buffer.h"
#include "kernels/gemm.h"
#include "weight-server/model/model_config.h"
#include "worker/engine/cuda/cuda_memory_plan.h"
#include "worker/engine/cuda/cuda_weights.h"

namespace hearth {

// The matrices of a step, for batch_matmul's tiling table.
enum MatmulShape { kQ, kKV, kO, kGateUp, kDown, kLmHead, kMatmulShapes };
// Row-count bands of the tiling table: up to 16, 32, 64, ..., 2048 rows, then more.
inline constexpr int kMatmulBands = 9;
int matmul_band(int m);
using TilingTable = std::array<std::array<kernels::MatmulTiles, kMatmulBands>, kMatmulShapes>;

class CudaMatmuls {
 public:
  // One workspace for every shape of a step of `limits`, in stream order. batch_invariant:
  // false also warms up cuBLASLt (before any decode graph is captured) and holds its 16-bit
  // gate/up outputs, which SwiGLU then combines.
  // fp8: also the quantized input (codes and a scale per row) of the widest projection.
  CudaMatmuls(const ModelConfig& config, const StepLimits& limits, kernels::Half type,
              bool batch_invariant, bool fp8, DeviceArena& arena);

  // out = a · wᵀ (and w_up for SwiGLU), a being m rows of k, w n rows of k; `a` holds the
  // rows of a whole step (limits.max_tokens; the LM head's, max_step_seqs), which the kernels
  // may read past m (kernels::a_map_rows).
  void run(MatmulShape shape, kernels::MatmulEpilogue epilogue, const void* a, const void* w,
           const void* w_up, void* out, int m, int n, int k, cudaStream_t stream);

  // True when q, k and v run as one launch (run_qkv): the wgmma kernel, batch_invariant on.
  bool fuses_qkv() const;
  // q = a · wqᵀ, k = a · wkᵀ, v = a · wvᵀ, fp32 out, in one launch of the wgmma kernel over the
  // three weights (the bits of three calls; k and v alone are too few tiles to fill the GPU);
  // three calls where it does not fuse.
  void run_qkv(const void* a, const void* wq, const void* wk, const void* wv, void* q, void* k,
               void* v, int m, int q_dim, int kv_dim, int hidden, cudaStream_t stream);
  // fp8: `a` (m rows of k values of the 16-bit type) quantized to e4m3 codes and row scales,
  // the input of every run_fp8 until the next quantize.
  void quantize(const void* a, int m, int k, cudaStream_t stream);
  // fp8: rmsnorm of m fp32 rows of k (kernels/ops.h) quantized as quantize() would quantize
  // its 16-bit output (the same bits), in one kernel: the input of q/k/v and of gate/up.
  void rmsnorm_quantize(const float* x, const float* weight, int m, int k, float eps,
                        cudaStream_t stream);
  // fp8: out = the quantized input times the codes w (and w_up for SwiGLU), each product
  // scaled by its input row's and weight row's scales; the epilogues of run().
  void run_fp8(kernels::MatmulEpilogue epilogue, const void* w, const float* w_scale,
               const void* w_up, const float* w_up_scale, void* out, int m, int n, int k,
               cudaStream_t stream);

  // fp8: q, k and v from the quantized input in one launch of the fp8 matmul over the three
  // weights (each with its scales), fp32 out: the bits of three run_fp8 calls.
  void run_qkv_fp8(const void* wq, const float* sq, const void* wk, const float* sk, const void* wv,
                   const float* sv, void* q, void* k, void* v, int m, int q_dim, int kv_dim,
                   int hidden, cudaStream_t stream);

  // One matrix of a step to tune: its operands' buffers (any contents) and largest row count.
  struct TuneJob {
    MatmulShape shape;
    kernels::MatmulEpilogue epilogue;
    int n, k, max_m;
    const void* a;
    void* out;
  };
  // Times every tiling of every job at the top of each band of row counts it meets, on the
  // layers' own weights in turn (so they stream from memory, not L2), and keeps the fastest
  // where it beats the shape-based choice by more than 3%. Tilings whose scratch would be large
  // (K slices spread over many rows) are not tried. Grows the workspace when the choice needs.
  void tune(std::span<const TuneJob> jobs, const CudaWeights& weights, cudaStream_t stream,
            DeviceArena& arena);

  const TilingTable& tiling() const { return tiles_; }

 private:
  // batch_invariant: false: cuBLASLt, whose kernel choice (and so the bits) depends on M.
  void cublas(kernels::MatmulEpilogue epilogue, const void* a, const void* w, const void* w_up,
              void* out, int m, int n, int k, cudaStream_t stream);

  kernels::Half type_;
  int max_tokens_, max_step_seqs_;  // rows every `a` buffer holds (LM head: max_step_seqs_)
  size_t ws_bytes_ = 0;
  DeviceBuffer ws_;
  TilingTable tiles_{};  // Auto everywhere unless tuned
  std::unique_ptr<kernels::Gemm> gemm_;
  DeviceBuffer gate16_, up16_;
  DeviceBuffer codes_, row_scales_;  // fp8: the quantized input
  int quantized_m_ = 0, quantized_k_ = 0;
};

}  // namespace hearth
