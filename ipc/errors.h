#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hearth::ipc {

// The codes a reply carries in `error.code`. They are part of the protocol: add, never rename.
enum class ErrorCode {
  kBadRequest,       // not a valid frame or request (malformed JSON, missing fields, stray FDs)
  kUnknownOp,        // the op is not part of the protocol
  kTooLarge,         // a frame or batch over its limit
  kUnauthorized,     // uid not allowed to connect, or an admin op from a non-admin uid
  kNotFound,         // no such model, allocation, ...
  kBusy,             // too many clients, or the resource is in use (e.g. unload with leases)
  kInternal,         // the server failed; not the client's fault
  kVersionMismatch,  // client and server speak different protocol versions
  kTimeout,          // the client stalled while the server was waiting on it
  kShuttingDown,     // the server is stopping
};

std::string_view to_string(ErrorCode code);
std::optional<ErrorCode> parse_error_code(std::string_view text);

// A local transport failure: a socket call failed, the peer closed the connection, or it sent
// bytes that are not a frame.
class IpcError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Nothing is listening at the socket path: no socket file, or a stale one from a dead server.
class ServerNotRunning : public IpcError {
 public:
  using IpcError::IpcError;
};

// The peer closed the connection (EOF, EPIPE or ECONNRESET).
class ConnectionClosed : public IpcError {
 public:
  using IpcError::IpcError;
};

// Nothing arrived within the configured timeout.
class TimeoutError : public IpcError {
 public:
  using IpcError::IpcError;
};

// A failure that has a protocol error code. Request parsing and handlers throw it (the broker
// turns it into an error reply), and Client throws it when the server replies ok:false.
class ProtocolError : public IpcError {
 public:
  ProtocolError(ErrorCode code, std::string message);
  ErrorCode code() const noexcept { return code_; }
  // The message without the "code: " prefix that what() carries.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

// Throws IpcError("<context>: <strerror(err)>").
[[noreturn]] void throw_errno(const std::string& context, int err);

}  // namespace hearth::ipc
