// The generation loop: prefill the prompt, then sample and decode one token at a time until an
// end-of-sequence token, the token budget, the context or a stop string ends it. Text is
// produced incrementally and only in whole UTF-8 characters.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "worker/engine/backend.h"
#include "worker/engine/request_settings.h"

namespace hearth {

class Tokenizer;

enum class StopReason { Eos, Length, StopString };
const char* stop_reason_name(StopReason reason);  // "eos", "length", "stop"

struct TokenEvent {
  int32_t token = 0;
  float logprob = 0.0f;
  std::string text;     // this token's share of the decoded text
  std::string visible;  // text safe to show now: stop strings and their possible starts held back
};

struct GenerationStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  StopReason stop = StopReason::Length;
  double prefill_ms = 0, time_to_first_token_ms = 0, decode_ms = 0;
  std::string final_visible;  // held-back text released at the end (never part of a stop string)
};

class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual void on_token(const TokenEvent& event) = 0;
  virtual void on_done(const GenerationStats& stats) = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  RequestSettings settings;
  std::vector<int32_t> eos_ids;
};

// Runs one request to completion on `backend`, streaming into `sink`. `tokenizer` may be null
// (token ids only; stop strings then never match).
GenerationStats generate(Backend& backend, const Tokenizer* tokenizer,
                         const GenerationRequest& request, TokenSink& sink);

}  // namespace hearth
