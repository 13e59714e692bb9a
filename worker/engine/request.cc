#include "worker/engine/request.h"

#include <charconv>

#include "worker/engine/logprobs.h"

namespace hearth {

RequestError::RequestError(std::string request_id, std::string field, const std::string& why)
    : std::runtime_error((request_id.empty() ? "" : "request '" + request_id + "': ") + field +
                         ": " + why),
      request_id_(std::move(request_id)),
      field_(std::move(field)) {}

namespace {

std::string shortest(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

void range(const std::string& id, const char* field, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi))  // NaN fails too
    throw RequestError(
        id, field, "must be in [" + shortest(lo) + ", " + shortest(hi) + "], got " + shortest(v));
}

}  // namespace

void check_request_settings(const std::string& id, const RequestSettings& s) {
  const SamplingParams& p = s.sampling;
  range(id, "temperature", p.temperature, 0.0, 100.0);
  range(id, "top_k", p.top_k, 0, 1 << 30);
  range(id, "top_p", p.top_p, 0.0, 1.0);
  if (p.top_p <= 0.0f) throw RequestError(id, "top_p", "must be greater than 0");
  range(id, "min_p", p.min_p, 0.0, 1.0);
  range(id, "repetition_penalty", p.repetition_penalty, 1e-3, 100.0);
  range(id, "max_tokens", s.max_tokens, 0, 1 << 24);
  range(id, "logprobs", s.logprobs, 0, kMaxTopLogprobs);
  for (const std::string& stop : s.stop)
    if (stop.empty()) throw RequestError(id, "stop", "stop strings must be non-empty");
}

}  // namespace hearth
