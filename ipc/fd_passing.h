#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "base/unique_fd.h"

namespace hearth::ipc {

// At most this many FDs travel with one frame; larger sets go in batches. (Linux caps one
// SCM_RIGHTS message at 253.)
inline constexpr std::size_t kMaxFdsPerFrame = 250;

enum class IoStatus {
  kOk,          // `bytes` > 0 were transferred
  kWouldBlock,  // non-blocking socket, nothing transferred
  kClosed,      // the peer is gone: end of stream, EPIPE or ECONNRESET
};

struct IoResult {
  IoStatus status = IoStatus::kOk;
  std::size_t bytes = 0;
};

// One recvmsg on a Unix stream socket: up to buffer.size() bytes, plus any FDs sent with them,
// which are opened close-on-exec and appended to `fds`. Retries EINTR. Throws IpcError on other
// failures, including truncated control data (a peer sending more than kMaxFdsPerFrame FDs, or
// this process out of descriptors); the FDs that did arrive are closed first.
IoResult receive_with_fds(int socket, std::span<char> buffer, std::vector<UniqueFd>& fds);

// One sendmsg: a prefix of `bytes` with `fds` attached to its first byte (the receiver gets them
// with the recvmsg that reads that byte). Retries EINTR, never raises SIGPIPE. Throws IpcError
// on failures other than kWouldBlock/kClosed, or if fds.size() > kMaxFdsPerFrame.
IoResult send_with_fds(int socket, std::span<const char> bytes, std::span<const int> fds);

}  // namespace hearth::ipc
