// Where generated tokens go: plain text as it is produced, or one JSON object per token
// followed by a summary (`--format jsonl`, the form the proof harness consumes).
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>

#include "worker/engine/generator.h"

namespace hearth {

class TextSink final : public TokenSink {
 public:
  explicit TextSink(std::FILE* out) : out_(out) {}
  void on_token(const TokenEvent& event) override;
  void on_done(const GenerationStats& stats) override;

 private:
  std::FILE* out_;
};

class JsonlSink final : public TokenSink {
 public:
  // `extra_timings` (e.g. load_ms) is merged into the summary's timings object.
  JsonlSink(std::FILE* out, nlohmann::json extra_timings)
      : out_(out), extra_timings_(std::move(extra_timings)) {}
  void on_token(const TokenEvent& event) override;
  void on_done(const GenerationStats& stats) override;

 private:
  void write(const nlohmann::json& line);
  std::FILE* out_;
  nlohmann::json extra_timings_;
};

}  // namespace hearth
