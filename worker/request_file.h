// `hearth-worker --requests FILE.jsonl`: one request per line, as a JSON object with an "id"
// (a string), the prompt as "prompt" (text, encoded with the model's tokenizer and its special
// tokens) or "prompt_tokens" (token ids, used exactly), and any request setting (temperature,
// max_tokens, stop, logprobs, ...) over the worker's profile. Blank lines are skipped. A bad
// line refuses that request only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "worker/engine/request.h"

namespace hearth {

class Tokenizer;

struct RequestLine {
  int line = 0;       // 1-based
  Request request;    // request.id is the line's id, or "line N" when it has no usable one
  std::string error;  // set when the line is refused: the message names the line and the field
};

// `tokenizer` may be null: "prompt" is then refused, "prompt_tokens" still works.
std::vector<RequestLine> parse_request_lines(std::string_view text, const RequestSettings& defaults,
                                             const Tokenizer* tokenizer);

}  // namespace hearth
