#include "ipc/errors.h"

#include <array>
#include <system_error>
#include <utility>

namespace hearth::ipc {
namespace {

constexpr std::array<std::pair<ErrorCode, std::string_view>, 10> kNames = {{
    {ErrorCode::kBadRequest, "bad_request"},
    {ErrorCode::kUnknownOp, "unknown_op"},
    {ErrorCode::kTooLarge, "too_large"},
    {ErrorCode::kUnauthorized, "unauthorized"},
    {ErrorCode::kNotFound, "not_found"},
    {ErrorCode::kBusy, "busy"},
    {ErrorCode::kInternal, "internal"},
    {ErrorCode::kVersionMismatch, "version_mismatch"},
    {ErrorCode::kTimeout, "timeout"},
    {ErrorCode::kShuttingDown, "shutting_down"},
}};

}  // namespace

std::string_view to_string(ErrorCode code) {
  for (const auto& [c, name] : kNames) {
    if (c == code) return name;
  }
  return "internal";
}

std::optional<ErrorCode> parse_error_code(std::string_view text) {
  for (const auto& [c, name] : kNames) {
    if (name == text) return c;
  }
  return std::nullopt;
}

ProtocolError::ProtocolError(ErrorCode code, std::string message)
    : IpcError(std::string(to_string(code)) + ": " + message),
      code_(code),
      message_(std::move(message)) {}

void throw_errno(const std::string& context, int err) {
  // std::system_category().message is thread-safe, unlike strerror.
  throw IpcError(context + ": " + std::system_category().message(err));
}

}  // namespace hearth::ipc
