// cuBLASLt is opened on first use, not at process start (kernels/cublaslt_library.h). Needs the
// CUDA toolkit's library but no GPU. Its own binary: nothing else may load the library first.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "kernels/cublaslt_library.h"

namespace hearth {
namespace {

bool mapped_in_this_process(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(CublasLtLibrary, LoadsOnFirstUseWithEveryEntryPoint) {
  EXPECT_FALSE(mapped_in_this_process("libcublasLt")) << "loaded before anything asked for it";

  const kernels::CublasLtLibrary& lt = kernels::cublaslt();
  EXPECT_TRUE(mapped_in_this_process("libcublasLt"));
  for (const void* fn :
       {(void*)lt.create, (void*)lt.destroy, (void*)lt.status_string, (void*)lt.desc_create,
        (void*)lt.desc_destroy, (void*)lt.desc_set, (void*)lt.layout_create,
        (void*)lt.layout_destroy, (void*)lt.preference_create, (void*)lt.preference_destroy,
        (void*)lt.preference_set, (void*)lt.heuristic, (void*)lt.matmul})
    EXPECT_NE(fn, nullptr);
  // Callable without a GPU: it names statuses for error messages ("success", ...).
  EXPECT_STRNE(lt.status_string(CUBLAS_STATUS_SUCCESS),
               lt.status_string(CUBLAS_STATUS_NOT_SUPPORTED));
  EXPECT_EQ(&kernels::cublaslt(), &lt) << "loaded once per process";
}

}  // namespace
}  // namespace hearth
