// sendmsg with file descriptors attached by SCM_RIGHTS, as many as a test likes: past the
// frame codec's own limit, to see what a receiver does with too many or with a cut frame.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstring>
#include <string>
#include <vector>

namespace hearth::test {

// Sends `bytes` on `socket` with `fds` attached; returns what sendmsg returns.
inline ssize_t send_with_fds(int socket, const std::string& bytes, const std::vector<int>& fds,
                             int flags = 0) {
  std::vector<char> control(CMSG_SPACE(fds.size() * sizeof(int)));
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  return ::sendmsg(socket, &msg, flags);
}

}  // namespace hearth::test
