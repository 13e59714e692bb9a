// A kernel's function attributes (cudaFuncSetAttribute: its dynamic shared memory) belong to the
// current device's context, so a launcher that sets them once per process breaks on the second
// GPU of a tensor-parallel process. PerDeviceOnce runs a launcher's setup once per device, and no
// caller on that device goes on before the setup has finished: a second host thread must not
// launch a kernel whose attribute the first is still setting. Plain C++ (the caller names the
// device), so its concurrency is tested without a GPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace hearth::kernels {

class PerDeviceOnce {
 public:
  // Runs `setup` unless it has finished on `device` before; a setup that throws counts as not
  // run, so the next caller tries again. Devices past 63 run it every time (it is idempotent).
  template <typename Setup>
  void run(int device, Setup&& setup) {
    if (device < 0 || device >= 64) {
      setup();
      return;
    }
    const uint64_t bit = uint64_t(1) << device;
    // The hot path, every launch: one load. Acquire pairs with the release below, so what the
    // setup did is visible to whoever sees its bit.
    if (done_.load(std::memory_order_acquire) & bit) return;
    std::lock_guard lock(mutex_);
    if (done_.load(std::memory_order_relaxed) & bit) return;
    setup();
    done_.fetch_or(bit, std::memory_order_release);
  }

 private:
  std::atomic<uint64_t> done_{0};
  std::mutex mutex_;  // held only while a device's setup runs, not on the hot path
};

}  // namespace hearth::kernels
