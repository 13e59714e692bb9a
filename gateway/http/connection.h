// One client connection, served on one pool thread: requests parsed from a per-connection
// buffer in order (pipelining), each answered before the next is read; keep-alive, HTTP/1.0,
// 100-continue, streamed responses. Every wait has a deadline and wakes when the server stops.
#pragma once

#include <string>

#include "gateway/http/message.h"
#include "gateway/http/request_parser.h"
#include "gateway/http/service.h"
#include "ipc/unique_fd.h"

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
  // drained for a moment (bounded) so our answer is read rather than lost to a reset.
  void refuse(const Request& req, int status, const std::string& message);

  UniqueFd fd_;
  Service& service_;
  RequestParser parser_;
  std::string buf_;  // bytes read and not yet parsed start at buf_[start_]
  size_t start_ = 0;
};

}  // namespace hearth::http
