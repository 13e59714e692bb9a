#include "ipc/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "ipc/errors.h"

namespace hearth::ipc {
namespace {

// Room for exactly kMaxFdsPerFrame descriptors: a peer that sends more gets MSG_CTRUNC, and the
// kernel closes the ones that did not fit.
constexpr std::size_t kControlBytes = CMSG_SPACE(kMaxFdsPerFrame * sizeof(int));

bool is_peer_gone(int err) {
  return err == EPIPE || err == ECONNRESET;
}

}  // namespace

IoResult receive_with_fds(int socket, std::span<char> buffer, std::vector<UniqueFd>& fds) {
  alignas(cmsghdr) char control[kControlBytes];
  iovec iov{buffer.data(), buffer.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);

  ssize_t n;
  do {
    n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {IoStatus::kWouldBlock, 0};
    if (is_peer_gone(errno)) return {IoStatus::kClosed, 0};
    throw_errno("recvmsg", errno);
  }

  // Take ownership of every descriptor before looking at anything else, so that each error path
  // below closes them.
  std::vector<UniqueFd> arrived;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char* data = CMSG_DATA(c);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, data + i * sizeof(int), sizeof(int));
      arrived.emplace_back(fd);
    }
  }
  if (msg.msg_flags & MSG_CTRUNC) {
    throw IpcError("recvmsg: control data truncated (the peer sent more than " +
                   std::to_string(kMaxFdsPerFrame) +
                   " file descriptors at once, or this process is out of descriptors); the " +
                   std::to_string(arrived.size()) + " that arrived were closed");
  }
  if (n == 0) return {IoStatus::kClosed, 0};  // end of stream; `arrived` is empty here
  for (UniqueFd& fd : arrived) fds.push_back(std::move(fd));
  return {IoStatus::kOk, static_cast<std::size_t>(n)};
}

IoResult send_with_fds(int socket, std::span<const char> bytes, std::span<const int> fds) {
  if (fds.size() > kMaxFdsPerFrame) {
    throw IpcError("cannot send " + std::to_string(fds.size()) +
                   " file descriptors in one frame (at most " + std::to_string(kMaxFdsPerFrame) +
                   "); send them in batches");
  }
  if (!fds.empty() && bytes.empty()) throw IpcError("file descriptors must travel with data");

  alignas(cmsghdr) char control[kControlBytes];
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  }

  ssize_t n;
  do {
    n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {IoStatus::kWouldBlock, 0};
    if (is_peer_gone(errno)) return {IoStatus::kClosed, 0};
    throw_errno("sendmsg", errno);
  }
  return {IoStatus::kOk, static_cast<std::size_t>(n)};
}

}  // namespace hearth::ipc
