#include "worker/startup_timeline.h"

namespace hearth {

void StartupTimeline::mark_at(const std::string& step, Clock::time_point when) {
  const double ms = std::chrono::duration<double, std::milli>(when - start_).count();
  const std::lock_guard lock(mutex_);
  if (!steps_.contains(step)) steps_[step] = ms;
}

void StartupTimeline::mark_after(const std::string& step, Clock::time_point since, double ms) {
  mark_at(step, since + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double, std::milli>(ms)));
}

void StartupTimeline::note(const std::string& key, const std::string& value) {
  const std::lock_guard lock(mutex_);
  steps_[key] = value;
}

bool StartupTimeline::has(const std::string& step) const {
  const std::lock_guard lock(mutex_);
  return steps_.contains(step);
}

nlohmann::json StartupTimeline::json() const {
  const std::lock_guard lock(mutex_);
  return steps_;
}

}  // namespace hearth
