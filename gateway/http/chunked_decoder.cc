#include "gateway/http/chunked_decoder.h"

#include <algorithm>
#include <cstdint>

namespace hearth::http {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

ChunkedDecoder::Status ChunkedDecoder::fail(int status, std::string message) {
  state_ = State::Failed;
  error_ = {status, std::move(message)};
  return Status::Error;
}

bool ChunkedDecoder::take_line(std::string_view data, size_t& pos, size_t max, const char* what) {
  const size_t lf = data.find('\n', pos);
  const size_t end = lf == std::string_view::npos ? data.size() : lf;
  if (line_.size() + (end - pos) > max) {
    fail(400, std::string(what) + " is longer than " + std::to_string(max) + " bytes");
    pos = end;
    return false;
  }
  line_.append(data.substr(pos, end - pos));
  if (lf == std::string_view::npos) {
    pos = data.size();
    return false;
  }
  pos = lf + 1;
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  return true;
}

// chunk-size [ BWS ";" extensions ] : hex digits, then nothing but an extension.
ChunkedDecoder::Status ChunkedDecoder::size_line() {
  size_t i = 0;
  uint64_t size = 0;
  for (; i < line_.size() && hex_value(line_[i]) >= 0; ++i) {
    if (size >> 60) return fail(400, "a chunk size has more than 16 hex digits");
    size = size * 16 + uint64_t(hex_value(line_[i]));
  }
  if (i == 0) return fail(400, "a chunk size is not a hex number");
  while (i < line_.size() && (line_[i] == ' ' || line_[i] == '\t')) ++i;
  if (i < line_.size() && line_[i] != ';')
    return fail(400, "a chunk-size line has bytes after the size that are not an extension");
  for (char c : line_)
    if ((uint8_t(c) < 0x20 && c != '\t') || c == 0x7f)
      return fail(400, "a chunk-size line holds a control character");
  line_.clear();
  if (size > limits_.max_body_bytes) {
    return fail(413, "the chunked body is larger than " + std::to_string(limits_.max_body_bytes) +
                         " bytes");
  }
  remaining_ = size_t(size);
  state_ = size == 0 ? State::Trailer : State::Data;
  return Status::NeedMore;
}

ChunkedDecoder::Status ChunkedDecoder::feed(std::string_view data, std::string& out,
                                            size_t& consumed) {
  size_t pos = 0;
  const auto finish = [&](Status s) {
    consumed = pos;
    return s;
  };
  while (true) {
    switch (state_) {
      case State::Failed:
        return finish(Status::Error);
      case State::Done:
        return finish(Status::Done);
      case State::Size: {
        if (!take_line(data, pos, limits_.max_line_bytes, "a chunk-size line"))
          return finish(state_ == State::Failed ? Status::Error : Status::NeedMore);
        if (size_line() == Status::Error) return finish(Status::Error);
        // The declared size alone decides: 413 before any of its data is read.
        if (remaining_ > limits_.max_body_bytes - out.size())
          return finish(fail(413, "the chunked body is larger than " +
                                      std::to_string(limits_.max_body_bytes) + " bytes"));
        break;
      }
      case State::Data: {
        const size_t n = std::min(remaining_, data.size() - pos);
        out.append(data.substr(pos, n));
        pos += n;
        remaining_ -= n;
        if (remaining_ > 0) return finish(Status::NeedMore);
        state_ = State::DataEnd;
        break;
      }
      case State::DataEnd: {
        // CRLF (or a bare LF) after the chunk's data, nothing else.
        if (pos == data.size()) return finish(Status::NeedMore);
        const char c = data[pos];
        if (c == '\r' && line_.empty()) {
          line_ = "\r";
          ++pos;
        } else if (c == '\n') {
          line_.clear();
          ++pos;
          state_ = State::Size;
        } else {
          return finish(fail(400, "a chunk's data is not followed by CRLF"));
        }
        break;
      }
      case State::Trailer: {
        const bool whole =
            take_line(data, pos, limits_.max_trailer_bytes - trailer_bytes_, "the trailer section");
        if (!whole) return finish(state_ == State::Failed ? Status::Error : Status::NeedMore);
        if (line_.empty()) {
          state_ = State::Done;
          break;
        }
        // Trailer fields are checked for shape and dropped: nothing hearth serves reads them.
        const size_t colon = line_.find(':');
        if (colon == 0 || colon == std::string::npos || line_[0] == ' ' || line_[0] == '\t')
          return finish(fail(400, "a trailer field is malformed"));
        for (char c : line_)
          if ((uint8_t(c) < 0x20 && c != '\t') || c == 0x7f)
            return finish(fail(400, "a trailer field holds a control character"));
        trailer_bytes_ = std::min(limits_.max_trailer_bytes, trailer_bytes_ + line_.size() + 1);
        line_.clear();
        break;
      }
    }
  }
}

}  // namespace hearth::http
