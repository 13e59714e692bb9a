// What the engine reports for a request: its new tokens, each with its logprob and text, and
// once, when it ends, why it ended and what it cost. Writers turn these into the one JSONL
// event schema (event_json.h) or plain text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "worker/engine/logprobs.h"

namespace hearth {

enum class FinishReason { Eos, Length, Stop, Cancelled, Error };
// "eos", "length", "stop", "cancelled", "error": the "stop" field of a final event.
const char* finish_reason_name(FinishReason reason);

struct TokenOutput {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;  // when the request asked for logprobs > 0
  std::string text;     // this token's share of the decoded text (whole UTF-8 characters)
  std::string visible;  // text safe to show now: stop strings and their possible starts held back
};

// Milliseconds, measured on the engine's steady clock.
struct RequestTimings {
  double queue_ms = 0;    // submitted -> first scheduled
  double prefill_ms = 0;  // first scheduled -> prompt computed
  double ttft_ms = 0;     // submitted -> first token
  double decode_ms = 0;   // first token -> finished
};

struct FinishOutput {
  FinishReason reason = FinishReason::Length;
  std::string error;  // reason Error: what went wrong
  int prompt_tokens = 0;
  int generated_tokens = 0;
  int cached_tokens = 0;  // prompt tokens found in the prefix cache, not computed
  int preemptions = 0;    // times the request lost its KV and was recomputed
  RequestTimings timings;
  std::string final_visible;  // held-back text released at the end (never part of a stop string)
};

// One step's news for one request.
struct RequestOutput {
  std::string id;
  std::vector<TokenOutput> tokens;
  std::optional<FinishOutput> finish;  // set in the request's last output
};

}  // namespace hearth
