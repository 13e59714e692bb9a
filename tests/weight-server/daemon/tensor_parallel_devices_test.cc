// The GPUs of a tensor-parallel vmm server (issue 26): the default 0..N-1, and each way a
// device list can be wrong refused naming the cause, before anything is uploaded.
#include <gtest/gtest.h>

#include <functional>

#include "tests/support/error_of.h"
#include "weight-server/daemon/tensor_parallel_devices.h"

namespace hearth {
namespace {

using test::error_of;

TEST(TensorParallelDevices, DefaultIsOneGpuPerRankInOrder) {
  EXPECT_EQ(resolve_tensor_parallel_devices({}, 2, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(resolve_tensor_parallel_devices({}, 2, 4), (std::vector<int>{0, 1}));
  EXPECT_EQ(resolve_tensor_parallel_devices({3, 1}, 2, 4), (std::vector<int>{3, 1}));
}

TEST(TensorParallelDevices, RefusesWhatCannotWork) {
  EXPECT_NE(error_of([] {
              resolve_tensor_parallel_devices({}, 4, 2);
            }).find("--tensor-parallel 4 needs 4 GPUs (one per rank), but this machine has 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { resolve_tensor_parallel_devices({}, 2, 0); }).find("this machine has 0"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              resolve_tensor_parallel_devices({0, 1, 2}, 2, 4);
            }).find("--devices names 3 GPUs for --tensor-parallel 2: name one per rank"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { resolve_tensor_parallel_devices({0}, 2, 4); }).find("--devices names 1 GPUs"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              resolve_tensor_parallel_devices({1, 1}, 2, 4);
            }).find("device 1 is named twice (one GPU per rank)"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              resolve_tensor_parallel_devices({0, 5}, 2, 4);
            }).find("device 5 is not present (this machine has devices 0..3)"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              resolve_tensor_parallel_devices({-1, 0}, 2, 4);
            }).find("device -1 is not present"),
            std::string::npos);
}

}  // namespace
}  // namespace hearth
