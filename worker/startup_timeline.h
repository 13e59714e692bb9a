// Where a worker's start-up time goes: for each step, the milliseconds from the start of main()
// to the moment the step was done. The worker adds it to its final JSONL events as "timeline"
// (worker/engine/README.md#events), so a slow cold start can be read off one run.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace hearth {

class StartupTimeline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StartupTimeline(Clock::time_point start) : start_(start) {}

  // `step` ("connect_ms", ...) was done now; a step already marked keeps its first time.
  void mark(const std::string& step) { mark_at(step, Clock::now()); }
  void mark_at(const std::string& step, Clock::time_point when);
  // The same for a step whose end is known as a duration after `since`.
  void mark_after(const std::string& step, Clock::time_point since, double ms);
  // A descriptive entry, such as where the tokenizer came from.
  void note(const std::string& key, const std::string& value);

  bool has(const std::string& step) const;
  nlohmann::json json() const;

 private:
  Clock::time_point start_;
  mutable std::mutex mutex_;  // --serve's connections write events from their own threads
  nlohmann::json steps_ = nlohmann::json::object();
};

}  // namespace hearth
