// Runs fn(i) for i in [0, n) on a few threads, handing out indices in order. Loading, hashing
// and verifying weights are per-tensor jobs of very different sizes, so a shared counter keeps
// every thread busy where fixed ranges would not. The first exception is rethrown after all
// threads have stopped; later items are skipped once one has failed.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace hearth {

template <typename Fn>
void parallel_for(size_t n, int threads, Fn&& fn) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i; !failed && (i = next++) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  };
  const size_t count =
      std::clamp<size_t>(threads > 0 ? size_t(threads) : 1, 1, std::max<size_t>(n, 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace hearth
