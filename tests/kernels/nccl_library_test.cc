// NCCL is optional: a missing library is a clear error naming the path and the variable that
// sets it, not a crash or a link failure. No GPU needed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/nccl_library.h"

namespace hearth {
namespace {

TEST(NcclLibrary, MissingLibraryNamesThePathAndTheVariable) {
  ::setenv("HEARTH_NCCL_LIBRARY", "/nonexistent/hearth-test/libnccl.so.2", 1);
  try {
    kernels::nccl::library();
    FAIL() << "loaded a library that does not exist";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/nonexistent/hearth-test/libnccl.so.2"), std::string::npos) << what;
    EXPECT_NE(what.find("HEARTH_NCCL_LIBRARY"), std::string::npos) << what;
  }
  ::unsetenv("HEARTH_NCCL_LIBRARY");
}

}  // namespace
}  // namespace hearth
