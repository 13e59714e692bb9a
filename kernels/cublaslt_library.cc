#include "kernels/cublaslt_library.h"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace hearth::kernels {

namespace {

const std::string kSoname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);

void* open_library() {
  // The loader's search path first (LD_LIBRARY_PATH, ld.so.conf), then the toolkit hearth was
  // built against, which is where a default CUDA install keeps it.
  std::string errors;
  for (const std::string& name : {kSoname, std::string(HEARTH_CUDA_LIBRARY_DIR) + "/" + kSoname,
                                  "/usr/local/cuda/lib64/" + kSoname}) {
    if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    errors += std::string("; ") + dlerror();
  }
  throw std::runtime_error("cannot load cuBLASLt (" + kSoname + ")" + errors);
}

template <typename Fn>
void resolve(void* library, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (!fn) throw std::runtime_error(kSoname + " has no entry point " + name);
}

CublasLtLibrary load() {
  void* h = open_library();  // kept for the life of the process
  CublasLtLibrary lib{};
  resolve(h, lib.create, "cublasLtCreate");
  resolve(h, lib.destroy, "cublasLtDestroy");
  resolve(h, lib.status_string, "cublasLtGetStatusString");
  resolve(h, lib.desc_create, "cublasLtMatmulDescCreate");
  resolve(h, lib.desc_destroy, "cublasLtMatmulDescDestroy");
  resolve(h, lib.desc_set, "cublasLtMatmulDescSetAttribute");
  resolve(h, lib.layout_create, "cublasLtMatrixLayoutCreate");
  resolve(h, lib.layout_destroy, "cublasLtMatrixLayoutDestroy");
  resolve(h, lib.preference_create, "cublasLtMatmulPreferenceCreate");
  resolve(h, lib.preference_destroy, "cublasLtMatmulPreferenceDestroy");
  resolve(h, lib.preference_set, "cublasLtMatmulPreferenceSetAttribute");
  resolve(h, lib.heuristic, "cublasLtMatmulAlgoGetHeuristic");
  resolve(h, lib.matmul, "cublasLtMatmul");
  return lib;
}

}  // namespace

const CublasLtLibrary& cublaslt() {
  static const CublasLtLibrary library = load();  // a throw leaves it for the next call
  return library;
}

}  // namespace hearth::kernels
