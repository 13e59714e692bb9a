// `hearth-worker --requests FILE.jsonl`: one request per line, as a JSON object with an "id"
// (a string), the prompt as "prompt" (text, encoded with the model's tokenizer and its special
// tokens) or "prompt_tokens" (token ids, used exactly), and any request setting (temperature,
// max_tokens, stop, logprobs, ...) over the worker's profile. Blank lines are skipped. A bad
// line refuses that request only. Texts (the prompt, stop strings) are used whole: an escaped
// U+0000 is a character like any other (it has a byte token; vLLM takes it too), never where a
// text ends; a raw NUL byte is not JSON, and the line's or frame's reader refuses it by offset.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/engine/request.h"

namespace hearth {

class Tokenizer;

struct RequestLine {
  int line = 0;       // 1-based
  Request request;    // request.id is the line's id, or "line N" when it has no usable one
  std::string error;  // set when the line is refused: the message names the line and the field
};

// One request object as above (also the body of a served worker's submit). Throws
// std::runtime_error starting with `where` and naming the field. `tokenizer` may be null:
// "prompt" is then refused, "prompt_tokens" still works.
Request request_from_json(nlohmann::json obj, const RequestSettings& defaults,
                          const Tokenizer* tokenizer, const std::string& where);

// Every non-blank line of a requests file, in order.
std::vector<RequestLine> parse_request_lines(std::string_view text, const RequestSettings& defaults,
                                             const Tokenizer* tokenizer);

}  // namespace hearth
