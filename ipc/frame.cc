#include "ipc/frame.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>

#include "ipc/errors.h"
#include "ipc/frame_reader.h"

namespace hearth::ipc {
namespace {

using Clock = std::chrono::steady_clock;

// Waits until `socket` is ready for `events` (or has an error/hangup, which the next call will
// report). Returns false if `deadline` passed first.
bool wait_ready(int socket, short events, std::optional<Clock::time_point> deadline) {
  for (;;) {
    int timeout_ms = -1;
    if (deadline) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left.count() <= 0) return false;
      timeout_ms = static_cast<int>(std::min<std::int64_t>(left.count(), INT32_MAX));
    }
    pollfd p{socket, events, 0};
    const int rc = ::poll(&p, 1, timeout_ms);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) throw_errno("poll", errno);
  }
}

}  // namespace

std::string encode_frame(const nlohmann::json& body, std::size_t max_bytes) {
  if (!body.is_object()) {
    throw IpcError(std::string("a frame must hold a JSON object, not ") + body.type_name());
  }
  std::string payload;
  try {
    payload = body.dump();
  } catch (const nlohmann::json::exception& e) {
    throw IpcError(std::string("cannot encode frame: ") + e.what());
  }
  if (payload.size() > max_bytes || payload.size() > UINT32_MAX) {
    throw ProtocolError(ErrorCode::kTooLarge, "frame of " + std::to_string(payload.size()) +
                                                  " bytes exceeds the limit of " +
                                                  std::to_string(max_bytes) + " bytes");
  }
  const auto n = static_cast<std::uint32_t>(payload.size());
  std::string out;
  out.reserve(kFrameHeaderBytes + payload.size());
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
  out += payload;
  return out;
}

void send_frame(int socket, const nlohmann::json& body, std::span<const int> fds,
                std::size_t max_bytes) {
  const std::string bytes = encode_frame(body, max_bytes);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    // FDs go with the frame's first byte; after that they are the kernel's.
    const std::span<const int> attach = sent == 0 ? fds : std::span<const int>{};
    const IoResult r = send_with_fds(socket, std::span(bytes).subspan(sent), attach);
    switch (r.status) {
      case IoStatus::kOk:
        sent += r.bytes;
        break;
      case IoStatus::kWouldBlock:
        wait_ready(socket, POLLOUT, std::nullopt);
        break;
      case IoStatus::kClosed:
        throw ConnectionClosed("connection closed by the peer while sending a frame");
    }
  }
}

std::optional<Frame> receive_frame(int socket, const ReceiveOptions& options) {
  FrameReader reader(options.max_frame_bytes, options.max_fds);
  std::optional<Clock::time_point> deadline;
  if (options.timeout) deadline = Clock::now() + *options.timeout;
  std::vector<char> buffer(64 * 1024);
  bool started = false;
  for (;;) {
    if (!wait_ready(socket, POLLIN, deadline)) {
      throw TimeoutError("no reply within " + std::to_string(options.timeout->count()) + " ms");
    }
    std::vector<UniqueFd> fds;
    // Never read past the end of this frame: the next one's bytes (and FDs) are not ours yet.
    const std::size_t want = std::min(reader.bytes_wanted(), buffer.size());
    const IoResult r = receive_with_fds(socket, std::span(buffer.data(), want), fds);
    if (r.status == IoStatus::kWouldBlock) continue;
    if (r.status == IoStatus::kClosed) {
      if (!started) return std::nullopt;
      throw ConnectionClosed("connection closed by the peer in the middle of a frame");
    }
    started = true;
    if (!reader.feed(std::span(buffer.data(), r.bytes), std::move(fds))) {
      throw ProtocolError(reader.error()->code, reader.error()->message);
    }
    if (auto frame = reader.pop()) return frame;
  }
}

}  // namespace hearth::ipc
