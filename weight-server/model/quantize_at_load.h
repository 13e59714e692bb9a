// Quantize at load (`hearth-server --quantize fp8`, `hearth-worker --quantize fp8`): a 16- or
// 32-bit model made into the fp8 model hearth-synth --dtype fp8 writes offline for the same
// weights, byte for byte (per-channel e4m3 codes and F32 [out, 1] scales, the rest as it was,
// config.json gaining its quantization_config). Done once on the host; every store (host,
// memfd, vmm) then holds the result as if it had been read from disk.
#pragma once

#include "weight-server/model/hf_model.h"

namespace hearth {

// Refuses (naming it) a model that is already quantized. `threads` quantize tensors in parallel.
HfModel quantize_fp8_at_load(const HfModel& source, int threads);

}  // namespace hearth
