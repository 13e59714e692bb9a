// cuBLASLt, loaded on first use instead of linked. Its load-time initialisation costs ~90 ms
// and ~200 MB of RSS before main() even runs; a worker on the CPU engine (or asked for --help)
// should not pay that, and a CUDA worker can pay it on a helper thread beside its context
// creation. Only the entry points hearth calls are resolved.
#pragma once

#include <cublasLt.h>

namespace hearth::kernels {

struct CublasLtLibrary {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtDestroy) destroy;
  decltype(&::cublasLtGetStatusString) status_string;
  decltype(&::cublasLtMatmulDescCreate) desc_create;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&::cublasLtMatmul) matmul;
};

// Loads the library once per process (thread-safe). Throws std::runtime_error naming the
// library when it cannot be found or lacks an entry point; a later call tries again.
const CublasLtLibrary& cublaslt();

}  // namespace hearth::kernels
