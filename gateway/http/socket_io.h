// Reads and writes on a blocking socket without ever blocking past a deadline: every call
// polls first (with the server's stop pipe beside the socket) and then reads or writes only
// what is ready (MSG_DONTWAIT).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace hearth::http {

using Clock = std::chrono::steady_clock;

enum class IoResult { Ok, Timeout, Closed, Stopped };

// Appends what one recv() gives (up to `max` bytes) to `buf`; `got` is how many.
IoResult read_some(int fd, int stop_fd, std::string& buf, size_t max, Clock::time_point deadline,
                   size_t& got);
// Writes all of `data` before the deadline.
IoResult write_all(int fd, int stop_fd, std::string_view data, Clock::time_point deadline);
// The peer closed or reset its side (POLLRDHUP, POLLHUP, POLLERR), asked without waiting.
bool peer_gone(int fd);
// The server's stop pipe has been written (it is never drained), asked without waiting.
bool stop_requested(int stop_fd);

}  // namespace hearth::http
