// Tokens per engine step as a histogram (vLLM's iteration_tokens_total). A serving worker counts
// every step and sends the running counts with its stats; the gateway adds what is new to its
// Prometheus histogram, so no step is missed between two scrapes (a last-step sample would).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace hearth {

// vLLM's buckets (upper bounds, inclusive); one more count for the tokens above the last.
inline constexpr std::array<double, 13> kIterationTokenBuckets = {
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

struct IterationTokens {
  std::array<uint64_t, kIterationTokenBuckets.size() + 1> counts{};  // per bucket, not cumulative
  uint64_t sum = 0;

  void observe(int tokens) {
    std::size_t i = 0;
    while (i < kIterationTokenBuckets.size() && double(tokens) > kIterationTokenBuckets[i]) ++i;
    ++counts[i];
    sum += uint64_t(tokens);
  }
};

}  // namespace hearth
