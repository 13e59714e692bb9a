#include "gateway/http/socket_io.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>

namespace hearth::http {

namespace {

// Waits for `events` on fd; Stopped as soon as the stop pipe is readable.
IoResult wait_for(int fd, int stop_fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return IoResult::Timeout;
    pollfd fds[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int n = ::poll(fds, stop_fd >= 0 ? 2 : 1, int(std::min<int64_t>(left, 60'000)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoResult::Closed;
    }
    if (stop_fd >= 0 && (fds[1].revents & POLLIN)) return IoResult::Stopped;
    if (fds[0].revents) return IoResult::Ok;  // ready, or an error the next call reports
  }
}

}  // namespace

IoResult read_some(int fd, int stop_fd, std::string& buf, size_t max, Clock::time_point deadline,
                   size_t& got) {
  got = 0;
  while (true) {
    const IoResult w = wait_for(fd, stop_fd, POLLIN, deadline);
    if (w != IoResult::Ok) return w;
    const size_t old = buf.size();
    buf.resize(old + max);
    const ssize_t n = ::recv(fd, buf.data() + old, max, MSG_DONTWAIT);
    buf.resize(old + size_t(std::max<ssize_t>(n, 0)));
    if (n > 0) {
      got = size_t(n);
      return IoResult::Ok;
    }
    if (n == 0) return IoResult::Closed;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return IoResult::Closed;
  }
}

IoResult write_all(int fd, int stop_fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const IoResult w = wait_for(fd, stop_fd, POLLOUT, deadline);
    if (w != IoResult::Ok) return w;
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(size_t(n));
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return IoResult::Closed;
    }
  }
  return IoResult::Ok;
}

bool peer_gone(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

bool stop_requested(int stop_fd) {
  // POLLIN: a pipe with data never reports POLLRDHUP, so peer_gone() cannot see a stop.
  pollfd p{stop_fd, POLLIN, 0};
  return stop_fd >= 0 && ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

}  // namespace hearth::http
