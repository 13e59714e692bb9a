// Decodes a chunked request body (RFC 9112 7.1) incrementally: bytes may arrive split anywhere.
// Bounded everywhere: the decoded size (413 as soon as a chunk's declared size would pass the
// limit, before its data is read), each chunk-size line, the trailer section.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "gateway/http/parse_error.h"

namespace hearth::http {

struct ChunkedLimits {
  size_t max_body_bytes = 16u << 20;
  size_t max_line_bytes = 1024;     // a chunk-size line with its extensions
  size_t max_trailer_bytes = 8192;  // all trailer fields together
};

class ChunkedDecoder {
 public:
  enum class Status { NeedMore, Done, Error };

  explicit ChunkedDecoder(ChunkedLimits limits) : limits_(limits) {}

  // Decodes a prefix of `data` into `out`; `consumed` says how many bytes it took. After Done,
  // the rest of `data` belongs to the next request.
  Status feed(std::string_view data, std::string& out, size_t& consumed);
  const ParseError& error() const { return error_; }

 private:
  enum class State { Size, Data, DataEnd, Trailer, Done, Failed };
  Status fail(int status, std::string message);
  // Takes one line from data[pos..] into line_ (without its LF and a CR before it); false
  // when the line is incomplete (all of data taken) or too long (error set).
  bool take_line(std::string_view data, size_t& pos, size_t max, const char* what);
  Status size_line();

  ChunkedLimits limits_;
  State state_ = State::Size;
  std::string line_;      // the line being gathered
  size_t remaining_ = 0;  // data bytes left in the current chunk
  size_t trailer_bytes_ = 0;
  ParseError error_;
};

}  // namespace hearth::http
