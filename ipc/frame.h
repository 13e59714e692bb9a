#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/fd_passing.h"
#include "base/json_limits.h"
#include "base/unique_fd.h"

// Wire format: a 4-byte little-endian payload length, then that many bytes of UTF-8 JSON (an
// object). FDs travel as SCM_RIGHTS attached to the frame's first byte.
namespace hearth::ipc {

inline constexpr std::size_t kFrameHeaderBytes = 4;
// The default payload limit, generous for any reply (a manifest's tokenizer and config files
// travel as memfds beside it since manifest version 2); the broker uses a much smaller one for
// requests.
inline constexpr std::size_t kDefaultMaxFrameBytes = std::size_t{64} << 20;
// A frame's JSON is refused deeper than kMaxJsonDepth (json_limits.h): nlohmann's copy and dump
// recurse, so a hostile peer could otherwise exhaust the stack with a small frame of brackets.

// One message: a JSON object and the FDs that came with it.
struct Frame {
  nlohmann::json body;
  std::vector<UniqueFd> fds;
};

// Header + payload bytes for `body`. Throws IpcError if `body` is not an object, holds strings
// that are not valid UTF-8, or encodes to more than `max_bytes`.
std::string encode_frame(const nlohmann::json& body, std::size_t max_bytes = kDefaultMaxFrameBytes);

// Sends one frame with `fds` attached, blocking until every byte is written (also on a
// non-blocking socket). Throws ConnectionClosed if the peer is gone, IpcError otherwise.
void send_frame(int socket, const nlohmann::json& body, std::span<const int> fds = {},
                std::size_t max_bytes = kDefaultMaxFrameBytes);

struct ReceiveOptions {
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;
  std::size_t max_fds = kMaxFdsPerFrame;  // a frame with more is refused (its FDs closed)
  std::optional<std::chrono::milliseconds> timeout;  // for the whole frame; none = wait forever
};

// Receives one frame, blocking (also on a non-blocking socket). Returns nullopt if the peer
// closed the connection cleanly before the first byte of a frame. Throws ConnectionClosed
// (closed mid-frame), ProtocolError (malformed frame; code says why), TimeoutError or IpcError.
// Every FD received for the frame is closed on every failure.
std::optional<Frame> receive_frame(int socket, const ReceiveOptions& options = {});

}  // namespace hearth::ipc
