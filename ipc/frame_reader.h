#pragma once

#include <array>
#include <cstddef>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ipc/errors.h"
#include "ipc/frame.h"

namespace hearth::ipc {

// Why a FrameReader stopped: the code for the error reply and a message for humans.
struct FrameError {
  ErrorCode code;
  std::string message;
};

// Incremental frame decoder for non-blocking readers: feed it what each recvmsg returned (bytes
// and FDs), take complete frames out. After a malformed frame it fails for good (a byte stream
// cannot be resynchronised) and closes every FD it holds.
//
// FDs belong to the frame that contains the last byte of the chunk they arrived with. The
// sender attaches them to a frame's first byte and the kernel ends a recvmsg right after the
// segment that carried them, so this is exact for every well-behaved sender; reading at most
// bytes_wanted() at a time makes it exact for any sender.
class FrameReader {
 public:
  explicit FrameReader(std::size_t max_frame_bytes = kDefaultMaxFrameBytes,
                       std::size_t max_fds = kMaxFdsPerFrame);

  // Bytes left in the frame being read (header or payload); never 0.
  std::size_t bytes_wanted() const;

  // Consumes a chunk and the FDs that arrived with it. Returns false once the reader has failed.
  bool feed(std::span<const char> bytes, std::vector<UniqueFd> fds = {});

  // The oldest complete frame, if any. Frames completed before a failure are still returned.
  std::optional<Frame> pop();

  const std::optional<FrameError>& error() const { return error_; }
  // True while part of a frame is buffered (a peer that stops here is stalling).
  bool mid_frame() const { return header_filled_ > 0; }

 private:
  void fail(ErrorCode code, std::string message);
  bool take_fds(std::vector<UniqueFd>& fds);
  void finish_frame();

  std::size_t max_frame_bytes_;
  std::size_t max_fds_;
  std::array<unsigned char, kFrameHeaderBytes> header_{};
  std::size_t header_filled_ = 0;
  std::size_t payload_size_ = 0;
  std::string payload_;
  std::vector<UniqueFd> fds_;  // FDs of the frame being read
  std::deque<Frame> ready_;
  std::optional<FrameError> error_;
};

// Parses a frame payload: a JSON object no deeper than kMaxJsonDepth. Throws ProtocolError
// (kBadRequest) otherwise.
nlohmann::json parse_frame_payload(std::string_view payload);

}  // namespace hearth::ipc
