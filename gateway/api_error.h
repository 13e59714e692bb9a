// An error answered to an HTTP client in OpenAI's shape:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// with the HTTP status that goes with it. Thrown anywhere below the HTTP layer, which turns it
// into the response; any other exception is a 500. The body is built so that dumping it can
// never throw: a message may quote what a client sent (or a library's text about it), so any
// byte that is not well-formed UTF-8 becomes U+FFFD.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/utf8.h"

namespace hearth::gateway {

// `text` with each byte that does not start a well-formed character replaced by U+FFFD.
inline std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t n = utf8_char_length(text);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      text.remove_prefix(1);
    } else {
      out.append(text.substr(0, n));
      text.remove_prefix(n);
    }
  }
  return out;
}

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string message, std::string param = {},
           std::optional<int> retry_after_s = std::nullopt)
      : std::runtime_error(std::move(message)),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        retry_after_s_(retry_after_s) {}

  // OpenAI's machine-readable `code` ("context_length_exceeded", "model_not_found", ...), which
  // clients match on; none (null) unless set. error_mapping.h lists every one hearth sends.
  ApiError& with_code(std::string code) {
    code_ = std::move(code);
    return *this;
  }

  int status() const { return status_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  std::optional<int> retry_after_s() const { return retry_after_s_; }

  nlohmann::json body() const {
    return {{"error",
             {{"message", valid_utf8(what())},
              {"type", valid_utf8(type_)},
              {"param", param_.empty() ? nlohmann::json() : nlohmann::json(valid_utf8(param_))},
              {"code", code_.empty() ? nlohmann::json() : nlohmann::json(valid_utf8(code_))}}}};
  }

 private:
  int status_;
  std::string type_;
  std::string param_;
  std::string code_;
  std::optional<int> retry_after_s_;
};

// 400: a parameter is missing, of the wrong type or out of range; `param` names it.
inline ApiError bad_param(const std::string& param, const std::string& why) {
  return ApiError(400, "invalid_request_error", "'" + param + "': " + why, param);
}

}  // namespace hearth::gateway
