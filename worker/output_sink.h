// Where a worker's request outputs go: plain text as it is produced (one request), or the JSONL
// events of event_json.h (`--format jsonl`, the form the proof harness and the gateway read).
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>

#include "worker/engine/request_output.h"
#include "worker/startup_timeline.h"

namespace hearth {

class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // Throws std::runtime_error when the output cannot be written (disk full, closed pipe).
  virtual void write(const RequestOutput& output) = 0;
};

// The visible text of one request, then a newline when it ends.
class TextSink final : public OutputSink {
 public:
  explicit TextSink(std::FILE* out) : out_(out) {}
  void write(const RequestOutput& output) override;

 private:
  std::FILE* out_;
};

// One event per token and one final event per request, each line flushed as it is written.
class JsonlSink final : public OutputSink {
 public:
  // `extra_timings` (e.g. load_ms) is merged into every final event's timings. `timeline`, when
  // given, gets "first_token_ms" when the first token is written and goes into every final
  // event as "timeline".
  JsonlSink(std::FILE* out, nlohmann::json extra_timings, StartupTimeline* timeline = nullptr)
      : out_(out), extra_timings_(std::move(extra_timings)), timeline_(timeline) {}
  void write(const RequestOutput& output) override;

 private:
  std::FILE* out_;
  nlohmann::json extra_timings_;
  StartupTimeline* timeline_;
};

}  // namespace hearth
