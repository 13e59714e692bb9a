// The one JSONL event schema: what a worker streams for its requests, one JSON object per line,
// and what every reader (the proof harness, the gateway) parses back. Writers and readers use
// these functions only, so the format lives here and nowhere else.
//
//   token: {"id": "r1", "token": 42, "text": "he", "logprob": -0.25,
//           "top_logprobs": [{"token": 42, "logprob": -0.25}, ...]}
//   final: {"id": "r1", "done": true, "stop": "eos|length|stop|cancelled|error",
//           "error": "...", "prompt_tokens": 4, "generated_tokens": 2, "cached_tokens": 0,
//           "timings": {"queue_ms": .., "prefill_ms": .., "ttft_ms": .., "decode_ms": ..,
//                       "decode_tokens_per_s": .., ...}}
//
// "visible" (token events: the text safe to show now, stop strings and their possible starts
// held back; written only when it differs from "text") and, on the final event, the held-back
// text released at the end: a client showing text concatenates "visible" where present, else
// "text", then the final event's "visible".
// "id" is left out for a request with an empty id (the single-prompt command line), so that
// output reads as it always has; "top_logprobs" only when the request asked for them; "error"
// only with "stop": "error". A logprob that is not finite is written as null (JSON has no NaN).
// Readers accept older streams: every field but "token", or "done", "stop" and
// "generated_tokens", may be missing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/engine/request_output.h"

namespace hearth {

struct TokenEvent {
  int32_t token = 0;
  double logprob = 0;  // NaN when written as null
  std::string text;
  std::vector<TokenLogprob> top_logprobs;
};

struct DoneEvent {
  std::string stop;   // eos | length | stop | cancelled | error (readers keep what they find)
  std::string error;  // with stop == "error"
  int64_t prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0;
  nlohmann::json timings = nlohmann::json::object();
};

struct Event {
  std::string id;
  bool done = false;  // which of the two below holds
  TokenEvent token;
  DoneEvent summary;
};

// Writing: `extra_timings` (e.g. load_ms) is merged into the final event's timings.
nlohmann::json token_event_json(const std::string& id, const TokenOutput& token);
nlohmann::json done_event_json(const std::string& id, const FinishOutput& finish,
                               const nlohmann::json& extra_timings = nlohmann::json::object());
// One line, newline included; a stray invalid UTF-8 byte is replaced, never fatal.
std::string event_line(const nlohmann::json& event);

// Reading: throws std::runtime_error saying what is wrong ("not a JSON object", "token event
// without an integer \"token\"", ...); the caller adds where.
Event event_from_json(const nlohmann::json& event);
Event parse_event_line(std::string_view line);

}  // namespace hearth
