// The few statistics the benchmarks report: elapsed milliseconds, nearest-rank percentiles and
// means, one definition for every table.
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hearth::bench {

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// `p` in [0, 1]; 0 for no samples.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5));
  return v[i];
}

// Per step, wall time minus device time: how long the device waited for the host.
inline std::vector<double> idle_ms(const std::vector<double>& wall,
                                   const std::vector<double>& gpu) {
  std::vector<double> idle(std::min(wall.size(), gpu.size()));
  for (size_t i = 0; i < idle.size(); ++i) idle[i] = wall[i] - gpu[i];
  return idle;
}

// Each stream's time to first token and inter-token latencies, from when its tokens came back.
class TokenLatencies {
 public:
  // `count` tokens of stream `id` came back at `t`; its first token's latency counts from
  // `since` (the run's start, or when the stream was submitted).
  void add(const std::string& id, size_t count, Clock::time_point since, Clock::time_point t) {
    for (size_t k = 0; k < count; ++k) {
      auto it = last_.find(id);
      if (it == last_.end()) {
        ttft.push_back(ms_between(since, t));
        last_.emplace(id, t);
      } else {
        itl.push_back(ms_between(it->second, t));
        it->second = t;
      }
    }
  }
  // A finished stream's last time, no longer needed (an id may not come back).
  void forget(const std::string& id) { last_.erase(id); }

  std::vector<double> ttft, itl;

 private:
  std::map<std::string, Clock::time_point> last_;
};

// The latency columns every serving table shows: TTFT and ITL, p50 and p99 (ms).
inline nlohmann::json latency_percentiles(const TokenLatencies& latency) {
  return {{"ttft_ms_p50", percentile(latency.ttft, 0.5)},
          {"ttft_ms_p99", percentile(latency.ttft, 0.99)},
          {"itl_ms_p50", percentile(latency.itl, 0.5)},
          {"itl_ms_p99", percentile(latency.itl, 0.99)}};
}

inline double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

}  // namespace hearth::bench
