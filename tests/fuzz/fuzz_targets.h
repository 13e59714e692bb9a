// Fuzz targets for the files a stranger's model directory or a user hands hearth: config.json,
// tokenizer.json, safetensors headers and profiles; the request bodies an HTTP client hands
// the gateway; and a serving worker's requests. Each takes arbitrary bytes and runs them
// through the loader as hearth does. Refusing an input is fine, with a std::runtime_error whose
// message names the file and is valid UTF-8 (it may travel in a JSON reply); anything else is a
// bug: another exception, a crash, a sanitizer report, a hang, or an accepted input whose
// result is inconsistent. Those throw FuzzBug. Each returns whether the input was accepted.
//
// The same functions serve the seeded GoogleTest loops (fuzz_test.cc, run in CI under
// ASan/UBSan) and the libFuzzer entry points (-DHEARTH_LIBFUZZER=ON, clang).
#pragma once

#include <stdexcept>
#include <string_view>

namespace hearth::fuzz {

class FuzzBug : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

bool config_json(std::string_view data);
bool tokenizer_json(std::string_view data);
bool safetensors(std::string_view data);
bool profile_json(std::string_view data);
// A request body as hearth-gateway reads it, for every endpoint: /v1/completions and
// /v1/chat/completions (parse_completion_request, then the bounds of what goes to a worker),
// /tokenize and /detokenize. A refusal must be an ApiError 400 whose body dumps.
bool gateway_request(std::string_view data);
// A serving worker's request frame body (hearth-worker --serve): the envelope, then the op's
// body (submit / events / cancel / stats, worker/serve_protocol.h) and a submit's request as
// the worker reads it (request_from_json, the default model's tokenizer). A refusal is a
// ProtocolError(bad_request) naming the op, in UTF-8; an accepted submit's request is usable.
bool serve_request(std::string_view data);

}  // namespace hearth::fuzz
