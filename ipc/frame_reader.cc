#include "ipc/frame_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace hearth::ipc {
namespace {

std::size_t decode_length(const std::array<unsigned char, kFrameHeaderBytes>& h) {
  return std::size_t{h[0]} | std::size_t{h[1]} << 8 | std::size_t{h[2]} << 16 |
         std::size_t{h[3]} << 24;
}

}  // namespace

nlohmann::json parse_frame_payload(std::string_view payload) {
  nlohmann::json body;
  try {
    body = parse_json(payload, "");
  } catch (const JsonError& e) {
    throw ProtocolError(ErrorCode::kBadRequest, e.what());
  }
  if (!body.is_object()) {
    throw ProtocolError(ErrorCode::kBadRequest,
                        std::string("a frame must hold a JSON object, not ") + body.type_name());
  }
  return body;
}

FrameReader::FrameReader(std::size_t max_frame_bytes, std::size_t max_fds)
    : max_frame_bytes_(max_frame_bytes), max_fds_(max_fds) {}

std::size_t FrameReader::bytes_wanted() const {
  if (header_filled_ < kFrameHeaderBytes) return kFrameHeaderBytes - header_filled_;
  return std::max<std::size_t>(payload_size_ - payload_.size(), 1);
}

bool FrameReader::feed(std::span<const char> bytes, std::vector<UniqueFd> fds) {
  if (error_) return false;  // `fds` close as the argument goes out of scope
  bool fds_taken = false;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    if (header_filled_ < kFrameHeaderBytes) {
      const std::size_t n = std::min(kFrameHeaderBytes - header_filled_, bytes.size() - pos);
      std::memcpy(header_.data() + header_filled_, bytes.data() + pos, n);
      header_filled_ += n;
      pos += n;
      if (header_filled_ < kFrameHeaderBytes) break;
      payload_size_ = decode_length(header_);
      if (payload_size_ > max_frame_bytes_) {
        fail(ErrorCode::kTooLarge, "frame of " + std::to_string(payload_size_) +
                                       " bytes exceeds the limit of " +
                                       std::to_string(max_frame_bytes_) + " bytes");
        return false;
      }
    }
    // Appending as bytes arrive (rather than reserving payload_size_ up front) keeps a peer
    // that announces a large frame and then stalls from pinning that much memory.
    const std::size_t n = std::min(payload_size_ - payload_.size(), bytes.size() - pos);
    payload_.append(bytes.data() + pos, n);
    pos += n;
    if (payload_.size() < payload_size_) break;
    if (pos == bytes.size()) {
      fds_taken = true;
      if (!take_fds(fds)) return false;
    }
    finish_frame();
    if (error_) return false;
  }
  // The chunk ended inside a frame: its FDs belong to that frame.
  if (!fds_taken && !take_fds(fds)) return false;
  return true;
}

std::optional<Frame> FrameReader::pop() {
  if (ready_.empty()) return std::nullopt;
  Frame frame = std::move(ready_.front());
  ready_.pop_front();
  return frame;
}

bool FrameReader::take_fds(std::vector<UniqueFd>& fds) {
  for (UniqueFd& fd : fds) fds_.push_back(std::move(fd));
  fds.clear();
  if (fds_.size() <= max_fds_) return true;
  if (max_fds_ == 0) {
    fail(ErrorCode::kBadRequest, std::to_string(fds_.size()) +
                                     " file descriptors arrived with a frame that must not "
                                     "carry any; they were closed");
  } else {
    fail(ErrorCode::kTooLarge, std::to_string(fds_.size()) +
                                   " file descriptors arrived with one frame (at most " +
                                   std::to_string(max_fds_) + "); they were closed");
  }
  return false;
}

void FrameReader::finish_frame() {
  Frame frame;
  try {
    frame.body = parse_frame_payload(payload_);
  } catch (const ProtocolError& e) {
    fail(e.code(), e.message());
    return;
  }
  frame.fds = std::move(fds_);
  fds_.clear();
  ready_.push_back(std::move(frame));
  header_filled_ = 0;
  payload_size_ = 0;
  payload_.clear();
  // A large frame should not keep its buffer for the rest of a long-lived connection.
  if (payload_.capacity() > 64 * 1024) payload_.shrink_to_fit();
}

void FrameReader::fail(ErrorCode code, std::string message) {
  error_ = FrameError{code, std::move(message)};
  fds_.clear();
  payload_ = std::string();
}

}  // namespace hearth::ipc
