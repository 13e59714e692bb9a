// The model's weights as both CUDA backends (single-sequence and batched) read them: the 16-bit
// matrices where the store placed them, never copied; norms and biases as small fp32 copies
// whatever their stored type; RoPE's inverse frequencies. Bound once at start-up.
// An fp8 model (issue 25) has its seven decoder projections as e4m3 codes, also read in place,
// each with one fp32 scale per output row on the GPU (a per-tensor scale repeated), as
// kernels/fp8_matmul.h takes them; only the batched engine multiplies by them.
#pragma once

#include <string>
#include <vector>

#include "kernels/device_buffer.h"
#include "kernels/ops.h"
#include "weight-server/model/model_config.h"
#include "weight-server/model/weight_store.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/model_weights.h"

namespace hearth {

// A layer as the kernels take it: matrices in place (16-bit), norms and biases as fp32 copies;
// null where the architecture has none.
using CudaLayerWeights = LayerTensors<const void*, const float*>;
// An fp8 layer's weight scales, [rows] fp32 per projection (the vectors unused: null).
using CudaLayerScales = LayerTensors<const float*, const float*>;

class CudaWeights {
 public:
  CudaWeights() = default;
  // Refuses f32 matrices, matrices of another 16-bit type than the embedding's, and matrices
  // not 16-byte aligned (the kernels load 16 bytes at a time). fp8 projections must be all
  // seven of every layer (never some), and are refused where require_fp8_matmul() fails, with
  // its message; the LM head stays 16-bit.
  static CudaWeights bind(const WeightStore& store, const ModelConfig& config);

  kernels::Half type() const { return type_; }  // the embedding's, and so every 16-bit matrix's
  // The projections are e4m3 codes: layer(l)'s matrices point at codes, scales(l) has theirs
  // (null everywhere in a 16-bit model).
  bool fp8() const { return fp8_; }
  const CudaLayerScales& scales(int l) const { return scales_[l]; }
  const void* embed() const { return embed_; }
  const void* lm_head() const { return lm_head_; }  // the embedding itself when tied
  const float* final_norm() const { return final_norm_; }
  const CudaLayerWeights& layer(int l) const { return layers_[l]; }
  int num_layers() const { return int(layers_.size()); }
  const float* inv_freq() const { return inv_freq_.get<float>(); }
  size_t copied_bytes() const;  // the fp32 copies and the frequencies, on the GPU
  // A 16-bit KV cache is kept in the weights' 16-bit type: an engine option asking for the
  // other one (Bf16 or F16; Auto follows the weights) is refused. fp8_e4m3 is accepted.
  void check_kv_cache_dtype(KvCacheDtype kv_cache_dtype) const;

 private:
  const float* upload_as_f32(const WeightRef& v);
  const float* upload_row_scales(const WeightRef& m);

  kernels::Half type_ = kernels::Half::BF16;
  const void* embed_ = nullptr;
  const void* lm_head_ = nullptr;
  const float* final_norm_ = nullptr;
  bool fp8_ = false;
  std::vector<CudaLayerWeights> layers_;
  std::vector<CudaLayerScales> scales_;
  std::vector<DeviceBuffer> copies_;  // norms, biases and fp8 scales as fp32
  DeviceBuffer inv_freq_;
};

}  // namespace hearth
