// The one head-dim switch of the attention kernels (kernels/head_dim_dispatch.h): each supported
// head_dim reaches the launcher as the same compile-time value, and any other is refused in the
// calling kernel's name before anything launches.
#include "kernels/head_dim_dispatch.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace hearth::kernels {
namespace {

TEST(HeadDimDispatch, EachSupportedHeadDimReachesItsInstantiation) {
  for (int head_dim : {16, 32, 64, 128}) {
    ASSERT_TRUE(head_dim_supported(head_dim));
    int launched = 0;
    dispatch_head_dim(head_dim, "test", [&](auto d) {
      constexpr int kHeadDim = decltype(d)::value;  // usable as a template argument
      launched = kHeadDim;
    });
    EXPECT_EQ(launched, head_dim);
  }
}

TEST(HeadDimDispatch, OtherHeadDimsAreRefusedInTheKernelsName) {
  for (int head_dim : {0, 8, 48, 80, 96, 256, -64}) {
    EXPECT_FALSE(head_dim_supported(head_dim));
    bool launched = false;
    try {
      dispatch_head_dim(head_dim, "attention_decode", [&](auto) { launched = true; });
      ADD_FAILURE() << "head_dim " << head_dim << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "attention_decode: head_dim must be 16, 32, 64 or 128");
    }
    EXPECT_FALSE(launched);
  }
}

}  // namespace
}  // namespace hearth::kernels
