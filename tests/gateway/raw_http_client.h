// A raw HTTP/1.1 client for tests: writes exactly the bytes a test gives (malformed ones,
// pipelined ones, one at a time) and reads responses off the socket with generous deadlines.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/unique_fd.h"

namespace hearth::test {

struct RawReply {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;                 // de-chunked
  std::vector<std::string> chunks;  // as framed, when chunked
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
    return "";
  }
};

class RawClient {
 public:
  static constexpr auto kPatience = std::chrono::seconds(20);

  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
  }

  int fd() const { return fd_.get(); }
  void close() { fd_.reset(); }

  // False when the server closed or reset the connection.
  bool send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(size_t(n));
    }
    return true;
  }

  // Waits up to the deadline for more bytes; false on EOF, reset or time out.
  bool fill(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd_.get(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) return false;
    char tmp[65536];
    const ssize_t n = ::recv(fd_.get(), tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, size_t(n));
    return true;
  }

  // One line (without CRLF), reading as needed.
  std::optional<std::string> line(std::chrono::steady_clock::time_point deadline) {
    size_t eol;
    while ((eol = buf_.find("\r\n")) == std::string::npos)
      if (!fill(deadline)) return std::nullopt;
    std::string l = buf_.substr(0, eol);
    buf_.erase(0, eol + 2);
    return l;
  }

  std::optional<std::string> bytes(size_t n, std::chrono::steady_clock::time_point deadline) {
    while (buf_.size() < n)
      if (!fill(deadline)) return std::nullopt;
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n);
    return out;
  }

  // Reads one status line and its headers (a 100 Continue included: the caller reads on).
  std::optional<RawReply> head(std::chrono::steady_clock::time_point deadline) {
    const auto status = line(deadline);
    if (!status || status->size() < 12 || status->rfind("HTTP/1.", 0) != 0) return std::nullopt;
    RawReply r;
    r.status = std::stoi(status->substr(9, 3));
    while (true) {
      const auto l = line(deadline);
      if (!l) return std::nullopt;
      if (l->empty()) break;
      const size_t colon = l->find(':');
      if (colon == std::string::npos) return std::nullopt;
      size_t v = colon + 1;
      while (v < l->size() && (*l)[v] == ' ') ++v;
      r.headers.emplace_back(l->substr(0, colon), l->substr(v));
    }
    return r;
  }

  // Reads one chunk of a chunked body; "" at the last (zero) chunk, nullopt on failure.
  std::optional<std::string> chunk(std::chrono::steady_clock::time_point deadline) {
    const auto size_line = line(deadline);
    if (!size_line) return std::nullopt;
    const size_t size = std::stoul(*size_line, nullptr, 16);
    auto data = bytes(size + 2, deadline);
    if (!data || data->substr(size) != "\r\n") return std::nullopt;
    data->resize(size);
    if (size == 0) {  // no trailers from our server: the CRLF above ended the body
      return std::string();
    }
    return data;
  }

  // A whole response, skipping interim 1xx ones.
  std::optional<RawReply> response() {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (true) {
      auto r = head(deadline);
      if (!r) return std::nullopt;
      if (r->status >= 100 && r->status < 200) continue;
      if (r->header("Transfer-Encoding") == "chunked") {
        while (true) {
          auto c = chunk(deadline);
          if (!c) return std::nullopt;
          if (c->empty()) break;
          r->chunks.push_back(*c);
          r->body += *c;
        }
      } else if (!r->header("Content-Length").empty()) {
        auto body = bytes(std::stoul(r->header("Content-Length")), deadline);
        if (!body) return std::nullopt;
        r->body = *body;
      } else {
        while (fill(deadline)) {
        }
        r->body = std::exchange(buf_, "");
      }
      return r;
    }
  }

  // True once the server closed the connection (EOF or reset) with nothing more to read.
  bool closed_by_server() {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (fill(deadline)) {
    }
    return std::chrono::steady_clock::now() < deadline;
  }

  std::string& buffered() { return buf_; }

 private:
  UniqueFd fd_;
  std::string buf_;
};

}  // namespace hearth::test
