#include "gateway/http/connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdio>

#include "gateway/http/socket_io.h"

namespace hearth::http {

namespace {

constexpr size_t kReadBlock = 64 << 10;
// What refuse() reads and drops after answering: a body whose Content-Length was refused as
// too large is drained whole (clients such as cpp-httplib's write it all before reading the
// answer), anything else up to kDrainBytes; never longer than kDrainTime.
constexpr size_t kDrainBytes = 256 << 10;
constexpr auto kDrainTime = std::chrono::seconds(5);

std::string status_line(int status) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
}

// The streamed body's sink: chunks framed (HTTP/1.1) or raw (HTTP/1.0, ended by close).
class StreamSink : public DataSink {
 public:
  StreamSink(int fd, const Service& service, bool chunked)
      : fd_(fd), service_(service), chunked_(chunked) {}

  bool write(const char* data, size_t size) override {
    if (broken_) return false;
    if (size == 0) return true;
    std::string frame;
    if (chunked_) {
      char head[24];
      std::snprintf(head, sizeof head, "%zx\r\n", size);
      frame.reserve(size + 32);
      frame.append(head).append(data, size).append("\r\n");
    } else {
      frame.assign(data, size);
    }
    broken_ = write_all(fd_, service_.stop_fd, frame,
                        Clock::now() + service_.options.write_timeout) != IoResult::Ok;
    if (!broken_) written_ += size;
    return !broken_;
  }
  void done() override { done_ = true; }
  bool client_gone() override {
    if (!broken_ && (peer_gone(fd_) || stop_requested(service_.stop_fd))) broken_ = true;
    return broken_;
  }

  bool finished() const { return done_; }
  bool broken() const { return broken_; }
  size_t written() const { return written_; }

 private:
  int fd_;
  const Service& service_;
  bool chunked_;
  bool done_ = false;
  bool broken_ = false;
  size_t written_ = 0;
};

}  // namespace

Connection::Connection(UniqueFd fd, Service& service)
    : fd_(std::move(fd)), service_(service), parser_(service.options.limits) {}

void Connection::serve() {
  while (true) {
    parser_.reset();
    if (!read_request()) return;
    Request& req = parser_.request();
    req.is_connection_closed = [this] {
      return peer_gone(fd_.get()) || stop_requested(service_.stop_fd);
    };
    Response res = dispatch(req);
    if (!send(req, res, parser_.keep_alive())) return;
  }
}

bool Connection::read_request() {
  const auto idle_deadline = Clock::now() + service_.options.keep_alive_timeout;
  std::optional<Clock::time_point> request_deadline;
  while (true) {
    size_t used = 0;
    const RequestParser::Status st = parser_.feed(std::string_view(buf_).substr(start_), used);
    start_ += used;
    if (start_ == buf_.size()) {
      buf_.clear();
      start_ = 0;
    }
    switch (st) {
      case RequestParser::Status::Complete:
        return true;
      case RequestParser::Status::Error:
        refuse(parser_.request(), parser_.error().status, parser_.error().message,
               parser_.error().status == 413 ? std::max(parser_.declared_length(), kDrainBytes)
                                             : kDrainBytes);
        return false;
      case RequestParser::Status::HeadComplete:
        // The client waits for this before sending its body (curl does for bodies over 1 KiB);
        // one that sent it anyway needs none.
        if (parser_.expects_continue() && buf_.empty() && !write("HTTP/1.1 100 Continue\r\n\r\n"))
          return false;
        continue;
      case RequestParser::Status::NeedMore:
        break;
    }
    if (parser_.started() && !request_deadline)
      request_deadline = Clock::now() + service_.options.request_timeout;
    if (start_ > 0) {  // keep only what the parser has not taken
      buf_.erase(0, start_);
      start_ = 0;
    }
    size_t got = 0;
    const IoResult r = read_some(fd_.get(), service_.stop_fd, buf_, kReadBlock,
                                 request_deadline.value_or(idle_deadline), got);
    service_.stats.bytes_read += got;
    if (r == IoResult::Ok) continue;
    if (r == IoResult::Timeout && parser_.started()) {
      refuse(parser_.request(), 408,
             "the request did not arrive within " +
                 std::to_string(service_.options.request_timeout.count()) + " ms",
             kDrainBytes);
    }
    return false;  // idle past keep-alive, closed by the client, or the server is stopping
  }
}

Response Connection::dispatch(const Request& req) {
  ++service_.stats.requests;
  Response res;
  try {
    if (!service_.pre_routing || service_.pre_routing(req, res) == HandlerResponse::Unhandled) {
      const Router::Match m = service_.router.find(req.method, req.path);
      if (m.handler) {
        (*m.handler)(req, res);
      } else {
        res.status = m.status;
        if (m.status == 405) {
          res.set_header("Allow", m.allow);
          res.error_message = "the method " + req.method + " is not allowed on " + req.path +
                              " (allowed: " + m.allow + ")";
        } else {
          res.error_message = "no route for " + req.method + " " + req.path;
        }
      }
    }
  } catch (...) {
    res = Response();
    res.status = 500;
    res.error_message = "the handler failed";
    if (service_.on_exception) {
      try {
        service_.on_exception(req, res, std::current_exception());
      } catch (...) {
        res = Response();
        res.status = 500;
      }
    }
  }
  if (res.status >= 400 && res.body.empty() && !res.provider) fill_error_body(req, res);
  return res;
}

void Connection::fill_error_body(const Request& req, Response& res) {
  if (service_.on_error) {
    try {
      service_.on_error(req, res);
    } catch (...) {
      res.body.clear();
    }
  }
  if (res.body.empty()) {
    const std::string text =
        res.error_message.empty() ? reason_phrase(res.status) : res.error_message;
    res.set_content(text + "\n", "text/plain; charset=utf-8");
  }
}

bool Connection::write(std::string_view data) {
  return write_all(fd_.get(), service_.stop_fd, data,
                   Clock::now() + service_.options.write_timeout) == IoResult::Ok;
}

bool Connection::send(const Request& req, Response& res, bool keep_alive) {
  std::string head = status_line(res.status);
  for (const auto& [k, v] : res.headers) {
    // A handler's header must not split the response (CR/LF would start a new field).
    if (k.find_first_of("\r\n:") != std::string::npos ||
        v.find_first_of("\r\n") != std::string::npos)
      continue;
    head += k + ": " + v + "\r\n";
  }
  if (!res.content_type.empty()) head += "Content-Type: " + res.content_type + "\r\n";
  if (res.provider) {
    const bool chunked = req.minor_version >= 1;
    if (chunked) head += "Transfer-Encoding: chunked\r\n";
    if (!chunked || !keep_alive) head += "Connection: close\r\n";
    return send_stream(req, res, std::move(head) + "\r\n", chunked) && chunked && keep_alive;
  }
  head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  if (!keep_alive)
    head += "Connection: close\r\n";
  else if (req.minor_version == 0)
    head += "Connection: keep-alive\r\n";
  head += "\r\n";
  // One write for small responses: fewer packets, no Nagle wait.
  if (res.body.size() <= 16384) {
    head += res.body;
    if (!write(head)) return false;
  } else if (!write(head) || !write(res.body)) {
    return false;
  }
  if (!keep_alive) ::shutdown(fd_.get(), SHUT_WR);
  return keep_alive;
}

bool Connection::send_stream(const Request&, Response& res, std::string head, bool chunked) {
  StreamSink sink(fd_.get(), service_, chunked);
  bool ok = write(head);
  while (ok && !sink.finished() && !sink.broken()) {
    try {
      ok = res.provider(sink.written(), sink);
    } catch (...) {
      ok = false;  // a provider that throws abandons its stream
    }
  }
  ok = ok && sink.finished() && !sink.broken() && (!chunked || write("0\r\n\r\n"));
  if (res.completion) {
    try {
      res.completion(ok);
    } catch (...) {
    }
  }
  return ok;
}

void Connection::refuse(const Request& req, int status, const std::string& message, size_t drain) {
  Response res;
  res.status = status;
  res.error_message = message;
  fill_error_body(req, res);
  if (!send(req, res, /*keep_alive=*/false)) {
    // send() shut our side; read what the client still sends, bounded in bytes and time.
    const auto deadline = Clock::now() + kDrainTime;
    size_t drained = 0;
    std::string sink;
    while (drained < drain) {
      size_t got = 0;
      sink.clear();
      // Never past `drain`: a whole block on top of what was read could overshoot it.
      const size_t block = std::min(kReadBlock, drain - drained);
      if (read_some(fd_.get(), service_.stop_fd, sink, block, deadline, got) != IoResult::Ok) break;
      drained += got;
      service_.stats.bytes_discarded += got;
    }
  }
}

}  // namespace hearth::http
