// Where the wgmma matmul's two K halves meet (kernels/k_slices_exchange.h): counters first at a
// fixed place, partial sums after them, and a clear refusal for a launch that does not fit.
#include "kernels/k_slices_exchange.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace hearth::kernels::k_slices {
namespace {

std::string refusal(void* workspace, size_t bytes, size_t tiles, size_t partial_floats) {
  try {
    (void)exchange_in(workspace, bytes, tiles, partial_floats, "wgmma_matmul");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(KSlicesExchange, CountersComeFirstAndPartialsAfterThem) {
  const size_t partial_floats = 1000;
  std::vector<char> workspace(kCounterBytes + partial_floats * sizeof(float));
  const Exchange e = exchange_in(workspace.data(), workspace.size(), 17, partial_floats, "k");
  EXPECT_EQ(static_cast<void*>(e.counters), workspace.data());
  EXPECT_EQ(reinterpret_cast<char*>(e.partial), workspace.data() + kCounterBytes);
}

TEST(KSlicesExchange, ALaunchOfMoreTilesThanCountersIsRefused) {
  // The bound is the counters', whatever the workspace: the check never reads it.
  char byte = 0;
  const size_t all = std::numeric_limits<size_t>::max();
  EXPECT_EQ(refusal(&byte, all, kMaxCounters, 0), "");
  const std::string why = refusal(&byte, all, kMaxCounters + 1, 0);
  EXPECT_NE(why.find("wgmma_matmul: 262145 output tiles summed from K slices, at most 262144"),
            std::string::npos)
      << why;
}

TEST(KSlicesExchange, AMissingOrShortWorkspaceIsRefusedWithWhatItNeeds) {
  const size_t need = kCounterBytes + 64 * sizeof(float);
  const std::string missing = refusal(nullptr, need, 4, 64);
  EXPECT_NE(missing.find("needs a " + std::to_string(need) + "-byte workspace, 0 given"),
            std::string::npos)
      << missing;
  std::vector<char> workspace(need - 1);
  const std::string short_one = refusal(workspace.data(), workspace.size(), 4, 64);
  EXPECT_NE(short_one.find(std::to_string(need - 1) + " given (batch_matmul_workspace_bytes)"),
            std::string::npos)
      << short_one;
  workspace.resize(need);
  EXPECT_EQ(refusal(workspace.data(), workspace.size(), 4, 64), "");
}

}  // namespace
}  // namespace hearth::kernels::k_slices
