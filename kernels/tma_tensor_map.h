// The TMA descriptors the wgmma matmuls (kernels/wgmma_matmul.cu, kernels/fp8_matmul.cu) read
// their operands through: one 2-D K-major matrix, 128-byte swizzled. Host side only.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace hearth::kernels {

// A [rows, k] matrix of `type` (element_bytes each) whose rows are `ld` elements apart, read as
// boxes of box_k x box_rows elements into the 128-byte swizzle smem_desc describes; what lies
// past k or rows reads as zero (adds nothing to a sum). Throws std::runtime_error, prefixed by
// `who`, when the driver lacks cuTensorMapEncodeTiled or refuses the layout.
CUtensorMap swizzled_k_major_map(CUtensorMapDataType type, int element_bytes, const void* ptr,
                                 int rows, int k, int64_t ld, int box_k, int box_rows,
                                 const char* who);

}  // namespace hearth::kernels
