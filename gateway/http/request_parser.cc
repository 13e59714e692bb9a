#include "gateway/http/request_parser.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/hex_digits.h"

namespace hearth::http {

namespace {

// RFC 9110 5.6.2 tchar.
bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

bool is_ctl(char c) {
  return uint8_t(c) < 0x20 || c == 0x7f;
}

std::string hex_byte(char c) {
  std::string out = "0x";
  append_hex(out, uint8_t(c), 2);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The comma-separated elements of every field named `name`, trimmed, empty ones dropped.
std::vector<std::string_view> list_values(const Headers& headers, std::string_view name) {
  std::vector<std::string_view> out;
  for (const auto& [k, v] : headers) {
    if (!iequals(k, name)) continue;
    std::string_view rest = v;
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view item = trim(rest.substr(0, comma));
      if (!item.empty()) out.push_back(item);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return out;
}

// A printable excerpt of client bytes for an error message (they may be anything).
std::string quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 64)) out += (is_ctl(c) || uint8_t(c) >= 0x80) ? '?' : c;
  if (s.size() > 64) out += "...";
  return out + "'";
}

}  // namespace

RequestParser::RequestParser(ParseLimits limits) : limits_(limits) {}

void RequestParser::reset() {
  state_ = State::Head;
  request_ = Request();
  error_ = ParseError();
  line_.clear();
  head_bytes_ = 0;
  started_ = seen_request_line_ = expect_continue_ = false;
  keep_alive_ = true;
  body_ = Body::None;
  remaining_ = declared_length_ = 0;
  chunked_.reset();
}

RequestParser::Status RequestParser::fail(int status, std::string message) {
  state_ = State::Failed;
  error_ = {status, std::move(message)};
  keep_alive_ = false;
  return Status::Error;
}

RequestParser::Status RequestParser::feed(std::string_view data, size_t& consumed) {
  size_t pos = 0;
  const auto finish = [&](Status s) {
    consumed = pos;
    return s;
  };
  if (!data.empty()) started_ = true;
  while (true) {
    switch (state_) {
      case State::Failed:
        return finish(Status::Error);
      case State::Done:
        return finish(Status::Complete);
      case State::Head: {
        const size_t lf = data.find('\n', pos);
        const size_t end = lf == std::string_view::npos ? data.size() : lf;
        // Limits apply to what has arrived, complete line or not: nothing unbounded is kept.
        const size_t length = line_.size() + (end - pos);
        if (!seen_request_line_ && length > limits_.max_request_line)
          return finish(fail(414, "the request line is longer than " +
                                      std::to_string(limits_.max_request_line) + " bytes"));
        if (head_bytes_ + length > limits_.max_head_bytes)
          return finish(fail(431, "the request head is larger than " +
                                      std::to_string(limits_.max_head_bytes) + " bytes"));
        // A request line is printable ASCII and spaces (a CR only right before its LF): a byte
        // that cannot be in one (a TLS ClientHello's 0x16, any binary) is refused when it
        // arrives, not after the read timeout waiting for a line end that never comes.
        if (!seen_request_line_) {
          const std::string_view fresh = data.substr(pos, end - pos);
          auto refuse_byte = [&](char c, size_t offset) {
            return finish(fail(400, "byte " + hex_byte(c) + " at offset " + std::to_string(offset) +
                                        " cannot be in an HTTP/1.x request line"));
          };
          if (!fresh.empty() && !line_.empty() && line_.back() == '\r')
            return refuse_byte('\r', line_.size() - 1);  // a CR that no LF followed
          for (size_t i = 0; i < fresh.size(); ++i) {
            const char c = fresh[i];
            if ((is_ctl(c) && !(c == '\r' && i + 1 == fresh.size())) || uint8_t(c) >= 0x80)
              return refuse_byte(c, line_.size() + i);
          }
        }
        line_.append(data.substr(pos, end - pos));
        if (lf == std::string_view::npos) {
          pos = data.size();
          return finish(Status::NeedMore);
        }
        pos = lf + 1;
        head_bytes_ += line_.size() + 1;
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        const std::string text = std::move(line_);
        line_.clear();
        const Status s = line(text);
        if (s != Status::NeedMore) return finish(s);
        break;
      }
      case State::Body: {
        const std::string_view rest = data.substr(pos);
        if (body_ == Body::Length) {
          const size_t n = std::min(remaining_, rest.size());
          request_.body.append(rest.substr(0, n));
          pos += n;
          remaining_ -= n;
          if (remaining_ > 0) return finish(Status::NeedMore);
          state_ = State::Done;
          break;
        }
        size_t used = 0;
        const ChunkedDecoder::Status s = chunked_->feed(rest, request_.body, used);
        pos += used;
        if (s == ChunkedDecoder::Status::Error)
          return finish(fail(chunked_->error().status, chunked_->error().message));
        if (s == ChunkedDecoder::Status::NeedMore) return finish(Status::NeedMore);
        state_ = State::Done;
        break;
      }
    }
  }
}

RequestParser::Status RequestParser::line(std::string_view text) {
  if (!seen_request_line_) {
    if (text.empty()) return Status::NeedMore;  // RFC 9112 2.2: empty lines before it are ignored
    seen_request_line_ = true;
    return request_line(text);
  }
  if (text.empty()) return end_of_head();
  return header_line(text);
}

RequestParser::Status RequestParser::request_line(std::string_view text) {
  const size_t sp1 = text.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : text.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || text.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "the request line " + quoted(text) + " is not METHOD TARGET HTTP-VERSION");
  const std::string_view method = text.substr(0, sp1);
  std::string_view target = text.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = text.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "the method " + quoted(method) + " is not a token");
  if (target.empty() || std::any_of(target.begin(), target.end(),
                                    [](char c) { return is_ctl(c) || uint8_t(c) >= 0x80; }))
    return fail(400, "the request target " + quoted(target) + " holds bytes a URI may not");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9')
    return fail(400, "the HTTP version " + quoted(version) + " is malformed");
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1'))
    return fail(505, "HTTP version " + std::string(version.substr(5)) +
                         " is not supported (1.0 and 1.1 are)");
  request_.method = std::string(method);
  request_.minor_version = version[7] - '0';
  request_.target = std::string(target);
  // Absolute form (a proxy's): the path starts after the authority.
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() && iequals(target.substr(0, scheme.size()), scheme)) {
      const size_t slash = target.find('/', scheme.size());
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
    }
  }
  if (target.front() != '/' && target != "*")
    return fail(400, "the request target " + quoted(target) + " is not a path");
  const size_t q = target.find('?');
  request_.path = std::string(target.substr(0, q));
  request_.query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));
  return Status::NeedMore;
}

RequestParser::Status RequestParser::header_line(std::string_view text) {
  if (text.front() == ' ' || text.front() == '\t')
    return fail(400, "a header field is folded over lines (obsolete, refused)");
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos)
    return fail(400, "the header line " + quoted(text) + " has no ':'");
  const std::string_view name = text.substr(0, colon);
  if (!is_token(name)) return fail(400, "the header name " + quoted(name) + " is not a token");
  const std::string_view value = trim(text.substr(colon + 1));
  if (std::any_of(value.begin(), value.end(), [](char c) { return is_ctl(c) && c != '\t'; }))
    return fail(400, "the header " + std::string(name) + " holds a control character");
  if (request_.headers.size() >= limits_.max_headers)
    return fail(
        431, "the request has more than " + std::to_string(limits_.max_headers) + " header fields");
  request_.headers.emplace_back(std::string(name), std::string(value));
  return Status::NeedMore;
}

RequestParser::Status RequestParser::end_of_head() {
  const bool http11 = request_.minor_version == 1;
  size_t hosts = 0;
  for (const auto& [k, v] : request_.headers) hosts += iequals(k, "Host");
  if (http11 && hosts != 1)
    return fail(400, hosts == 0 ? "an HTTP/1.1 request has no Host header"
                                : "the request has more than one Host header");

  bool close = false, keep = false;
  for (std::string_view t : list_values(request_.headers, "Connection")) {
    close |= iequals(t, "close");
    keep |= iequals(t, "keep-alive");
  }
  keep_alive_ = !close && (http11 || keep);

  const std::vector<std::string_view> codings = list_values(request_.headers, "Transfer-Encoding");
  const bool has_length = request_.has_header("Content-Length");
  if (request_.has_header("Transfer-Encoding")) {
    if (has_length) return fail(400, "the request has both Content-Length and Transfer-Encoding");
    if (!http11) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    for (std::string_view c : codings)
      if (!iequals(c, "chunked"))
        return fail(501, "the transfer coding " + quoted(c) + " is not supported (chunked is)");
    if (codings.size() != 1) return fail(400, "Transfer-Encoding must name chunked exactly once");
    body_ = Body::Chunked;
    chunked_.emplace(
        ChunkedLimits{limits_.max_body_bytes, limits_.max_chunk_line, limits_.max_trailer_bytes});
  } else if (has_length) {
    // Every value (repeated fields, or a list) must be the same non-negative decimal number.
    std::optional<std::string_view> first;
    for (const auto& [k, v] : request_.headers) {
      if (!iequals(k, "Content-Length")) continue;
      if (trim(v).empty()) return fail(400, "Content-Length is empty");
    }
    for (std::string_view item : list_values(request_.headers, "Content-Length")) {
      if (!std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return fail(400, "Content-Length " + quoted(item) + " is not a non-negative integer");
      if (first && *first != item)
        return fail(400, "the request has differing Content-Length values");
      first = item;
    }
    if (!first) return fail(400, "Content-Length is empty");
    std::string_view digits = *first;
    while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
    uint64_t length = 0;
    for (char c : digits.substr(0, 19)) length = length * 10 + uint64_t(c - '0');
    declared_length_ = digits.size() > 19 ? SIZE_MAX : size_t(length);
    if (digits.size() > 19 || length > limits_.max_body_bytes)
      return fail(413, "the body (Content-Length " + std::string(digits.substr(0, 24)) +
                           ") is larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
    remaining_ = size_t(length);
    body_ = length > 0 ? Body::Length : Body::None;
  }

  if (request_.has_header("Expect")) {
    const std::string expect = request_.get_header_value("Expect");
    if (!iequals(expect, "100-continue"))
      return fail(417, "the expectation " + quoted(expect) + " is not supported");
    expect_continue_ = http11 && body_ != Body::None;
  }
  state_ = body_ == Body::None ? State::Done : State::Body;
  return Status::HeadComplete;
}

}  // namespace hearth::http
