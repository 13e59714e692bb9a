// A request as the engine takes it: an id the caller chooses, the prompt as token ids, and its
// own settings. Everything about how the worker runs (backend, KV pool, batch limits) is an
// engine option instead (engine_options.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/engine/request_settings.h"

namespace hearth {

struct Request {
  std::string id;  // unique among the engine's live requests; "" is allowed (one-shot runs)
  std::vector<int32_t> prompt;
  RequestSettings settings;
};

// A request the engine refused. The message names the request (unless its id is empty) and the
// field, e.g. "request 'r7': max_tokens: 300 prompt tokens + 256 max_tokens exceed the context
// length 512".
class RequestError : public std::runtime_error {
 public:
  RequestError(std::string request_id, std::string field, const std::string& why);
  const std::string& request_id() const { return request_id_; }
  const std::string& field() const { return field_; }
  const std::string& reason() const { return reason_; }  // the message without id and field

 private:
  std::string request_id_, field_, reason_;
};

// Throws RequestError naming the request and the field when a setting is out of its range
// (check_settings, request_settings.h).
void check_request_settings(const std::string& request_id, const RequestSettings& settings);

}  // namespace hearth
