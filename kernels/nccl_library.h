// NCCL, loaded at run time (dlopen) so hearth builds and runs where it is absent (CI): the
// handful of C entry points hearth calls, declared here from NCCL's public API documentation.
// The library is HEARTH_NCCL_LIBRARY when set, else the soname libnccl.so.2 on the loader's path
// (torch's pip wheel ships one under site-packages/nvidia/nccl/lib).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace hearth::kernels::nccl {

// The C API's types: results, data types and reduction ops are plain C enums (ints).
using Result = int;
inline constexpr Result kSuccess = 0;
using DataType = int;
inline constexpr DataType kFloat32 = 7;
using RedOp = int;
inline constexpr RedOp kSum = 0;
struct Comm;  // opaque
using CommHandle = Comm*;
struct UniqueId {
  char internal[128];
};

struct Library {
  Result (*get_unique_id)(UniqueId*);
  Result (*comm_init_rank)(CommHandle*, int nranks, UniqueId id, int rank);
  Result (*comm_init_all)(CommHandle*, int ndev, const int* devlist);
  Result (*comm_destroy)(CommHandle);
  Result (*all_reduce)(const void* send, void* recv, size_t count, DataType, RedOp, CommHandle,
                       cudaStream_t);
  Result (*group_start)();
  Result (*group_end)();
  const char* (*error_string)(Result);
  Result (*get_version)(int*);
};

// Loads it once per process (thread-safe). Throws std::runtime_error naming the path tried and
// the loader's reason when it cannot be loaded or lacks an entry point.
const Library& library();

// Throws with NCCL's description of `r` when it is not success.
void check(Result r, const char* what);

}  // namespace hearth::kernels::nccl
