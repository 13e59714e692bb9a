// Where hearth can multiply by fp8 weights: only the wgmma kernel of kernels/fp8_matmul.h, on a
// compute-capability 9.0 GPU (Hopper, sm_90a). There is no mma.sync fp8 path (Ada's m16n8k32
// e4m3 would be one; not built), so an engine asked for fp8 elsewhere must refuse by name
// rather than fall back to something slower or different. Plain C++ so it is testable anywhere.
#pragma once

#include <string>

namespace hearth::kernels {

// Empty when a device of this compute capability runs fp8 matmuls, else the error to show.
inline std::string fp8_matmul_refusal(int cc_major, int cc_minor) {
  if (cc_major == 9 && cc_minor == 0) return {};
  return "fp8 weights need hearth's fp8 wgmma matmul, which runs on compute capability 9.0 "
         "(H100/H200, sm_90a) only; this GPU is " +
         std::to_string(cc_major) + "." + std::to_string(cc_minor) +
         " and hearth has no fp8 matmul for it: load the model in bf16 or f16 instead";
}

}  // namespace hearth::kernels
