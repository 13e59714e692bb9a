// The kernels' per-device setup (kernels/per_device_once.h, their shared-memory attributes): once
// per device, and no caller on a device returns before that device's setup has finished, whichever
// host thread runs it. Plain C++: no GPU needed.
#include "kernels/per_device_once.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace hearth::kernels {
namespace {

TEST(PerDeviceOnce, EveryThreadWaitsForTheOneSetupOfItsDevice) {
  constexpr int kThreads = 8;
  for (int round = 0; round < 20; ++round) {
    PerDeviceOnce once;
    std::atomic<int> setups{0}, arrived{0}, early{0};
    std::atomic<bool> finished{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&] {
        arrived.fetch_add(1);
        once.run(0, [&] {
          setups.fetch_add(1);
          // Every thread is at (or in) run() before the setup ends: a caller that does not wait
          // for it would return while `finished` is still false.
          while (arrived.load() < kThreads) std::this_thread::yield();
          for (int i = 0; i < 1000; ++i) std::this_thread::yield();
          finished.store(true);
        });
        if (!finished.load()) early.fetch_add(1);
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(setups.load(), 1) << "round " << round;
    EXPECT_EQ(early.load(), 0) << "callers that went on before the setup had finished, round "
                               << round;
  }
}

TEST(PerDeviceOnce, EachDeviceHasItsOwnSetup) {
  PerDeviceOnce once;
  std::vector<int> setups(64, 0);
  for (int device : {0, 1, 0, 63, 1, 7, 63}) once.run(device, [&] { ++setups[device]; });
  EXPECT_EQ(setups[0], 1);
  EXPECT_EQ(setups[1], 1);
  EXPECT_EQ(setups[7], 1);
  EXPECT_EQ(setups[63], 1);
  EXPECT_EQ(setups[2], 0);
}

TEST(PerDeviceOnce, ASetupThatThrowsIsTriedAgain) {
  PerDeviceOnce once;
  int setups = 0;
  EXPECT_THROW(once.run(3,
                        [&] {
                          ++setups;
                          throw std::runtime_error("cudaFuncSetAttribute failed");
                        }),
               std::runtime_error);
  once.run(3, [&] { ++setups; });
  once.run(3, [&] { ++setups; });
  EXPECT_EQ(setups, 2) << "the failed setup, then one that finished";
}

TEST(PerDeviceOnce, DevicesOutsideTheBitsRunTheirSetupEveryTime) {
  PerDeviceOnce once;
  int setups = 0;
  for (int device : {64, 64, 200}) once.run(device, [&] { ++setups; });
  EXPECT_EQ(setups, 3);
}

}  // namespace
}  // namespace hearth::kernels
