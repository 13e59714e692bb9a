// One client connection, served on one pool thread: requests parsed from a per-connection
// buffer in order (pipelining), each answered before the next is read; keep-alive, HTTP/1.0,
// 100-continue, streamed responses. Every wait has a deadline and wakes when the server stops.
#pragma once

#include <string>

#include "gateway/http/message.h"
#include "gateway/http/request_parser.h"
#include "gateway/http/service.h"
#include "base/unique_fd.h"

namespace hearth::http {

class Connection {
 public:
  Connection(UniqueFd fd, Service& service);
  // Serves requests until the client leaves, an error closes the connection, or the server stops.
  void serve();

 private:
  // Reads until the parser has a whole request; false when the connection is done.
  bool read_request();
  Response dispatch(const Request& req);
  void fill_error_body(const Request& req, Response& res);
  // Writes the response; false when the connection must close.
  bool send(const Request& req, Response& res, bool keep_alive);
  bool send_stream(const Request& req, Response& res, std::string head, bool chunked);
  bool write(std::string_view data);
  // Answers a refused request and closes: our side first, then what the client still sends is
  // read and dropped (at most `drain` bytes, for a few seconds at most), so a client that
  // writes its whole body before reading gets our answer rather than a reset. Nothing of it
  // is kept.
  void refuse(const Request& req, int status, const std::string& message, size_t drain);

  UniqueFd fd_;
  Service& service_;
  RequestParser parser_;
  std::string buf_;  // bytes read and not yet parsed start at buf_[start_]
  size_t start_ = 0;
};

}  // namespace hearth::http
