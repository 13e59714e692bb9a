// Parses HTTP/1.x requests incrementally from a connection's buffer: bytes may arrive split
// anywhere, and several requests may sit in the buffer at once (pipelining), so the parser
// takes only what belongs to the current request and leaves the rest. Every part is bounded:
// the request line (414), the head and its number of fields (431), the body by Content-Length
// (413 before any of it is read) or chunked (ChunkedDecoder). Malformed syntax is 400, an
// unknown transfer coding 501, a version other than 1.0 and 1.1 505.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "gateway/http/chunked_decoder.h"
#include "gateway/http/message.h"
#include "gateway/http/parse_error.h"

namespace hearth::http {

struct ParseLimits {
  size_t max_request_line = 8192;     // 414 past it
  size_t max_head_bytes = 16384;      // request line and fields together; 431 past it
  size_t max_headers = 100;           // 431 past it
  size_t max_body_bytes = 16u << 20;  // 413 past it
  size_t max_chunk_line = 1024;
  size_t max_trailer_bytes = 8192;
};

class RequestParser {
 public:
  enum class Status {
    NeedMore,      // all of the data was taken; feed more
    HeadComplete,  // the head is parsed (request() has it, no body yet); feed again
    Complete,      // request() is whole; what was not consumed is the next request's
    Error,         // error() says why; the connection must answer it and close
  };

  explicit RequestParser(ParseLimits limits);

  // Takes a prefix of `data` (`consumed` bytes). Call again with the unconsumed rest, followed
  // by newly read bytes.
  Status feed(std::string_view data, size_t& consumed);
  // Ready for the next request on the same connection.
  void reset();

  Request& request() { return request_; }
  const ParseError& error() const { return error_; }
  // True once any byte of the current request was seen (before that, the connection idles).
  bool started() const { return started_; }
  // The head asked for "100 Continue" before its body (HTTP/1.1 only).
  bool expects_continue() const { return expect_continue_; }
  // Whether the connection may carry another request after this one.
  bool keep_alive() const { return keep_alive_; }
  bool has_body() const { return body_ != Body::None; }
  // The Content-Length the head declared (even one refused as too large; saturated), or 0.
  size_t declared_length() const { return declared_length_; }

 private:
  enum class State { Head, Body, Done, Failed };
  enum class Body { None, Length, Chunked };

  Status fail(int status, std::string message);
  Status line(std::string_view text);  // one complete head line
  Status request_line(std::string_view text);
  Status header_line(std::string_view text);
  Status end_of_head();

  ParseLimits limits_;
  State state_ = State::Head;
  Request request_;
  ParseError error_;
  std::string line_;  // the head line being gathered
  size_t head_bytes_ = 0;
  bool started_ = false;
  bool seen_request_line_ = false;
  bool expect_continue_ = false;
  bool keep_alive_ = true;
  Body body_ = Body::None;
  size_t remaining_ = 0;  // Content-Length bytes still to read
  size_t declared_length_ = 0;
  std::optional<ChunkedDecoder> chunked_;
};

}  // namespace hearth::http
