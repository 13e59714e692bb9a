#include "kernels/tma_tensor_map.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace hearth::kernels {

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's encoder, found once through the runtime (nothing links libcuda directly).
EncodeTiled encode_tiled(const char* who) {
  static EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                             cudaEnableDefault, &status);
    return err == cudaSuccess && status == cudaDriverEntryPointSuccess
               ? reinterpret_cast<EncodeTiled>(f)
               : nullptr;
  }();
  if (!fn) throw std::runtime_error(std::string(who) + ": cuTensorMapEncodeTiled is unavailable");
  return fn;
}

}  // namespace

CUtensorMap swizzled_k_major_map(CUtensorMapDataType type, int element_bytes, const void* ptr,
                                 int rows, int k, int64_t ld, int box_k, int box_rows,
                                 const char* who) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * cuuint64_t(element_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(box_k), cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encode_tiled(who)(&map, type, 2, const_cast<void*>(ptr), dims, strides, box, element_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(std::string(who) + ": cuTensorMapEncodeTiled failed (" +
                             std::to_string(r) + ")");
  return map;
}

}  // namespace hearth::kernels
