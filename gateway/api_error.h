// An error answered to an HTTP client in OpenAI's shape:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// with the HTTP status that goes with it. Thrown anywhere below the HTTP layer, which turns it
// into the response; any other exception is a 500.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace hearth::gateway {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string message, std::string param = {},
           std::optional<int> retry_after_s = std::nullopt)
      : std::runtime_error(std::move(message)),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        retry_after_s_(retry_after_s) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  std::optional<int> retry_after_s() const { return retry_after_s_; }

  nlohmann::json body() const {
    return {{"error",
             {{"message", what()},
              {"type", type_},
              {"param", param_.empty() ? nlohmann::json() : nlohmann::json(param_)},
              {"code", nlohmann::json()}}}};
  }

 private:
  int status_;
  std::string type_;
  std::string param_;
  std::optional<int> retry_after_s_;
};

// 400: a parameter is missing, of the wrong type or out of range; `param` names it.
inline ApiError bad_param(const std::string& param, const std::string& why) {
  return ApiError(400, "invalid_request_error", "'" + param + "': " + why, param);
}

}  // namespace hearth::gateway
