#include "tests/fuzz/http_request_target.h"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "gateway/http/request_parser.h"
#include "tests/fuzz/fuzz_targets.h"

namespace hearth::fuzz {

namespace {

using http::ParseLimits;
using http::Request;
using http::RequestParser;

// Small limits, so that mutations reach them.
ParseLimits limits() {
  ParseLimits l;
  l.max_request_line = 256;
  l.max_head_bytes = 1024;
  l.max_headers = 16;
  l.max_body_bytes = 2048;
  l.max_chunk_line = 64;
  l.max_trailer_bytes = 128;
  return l;
}

struct Outcome {
  std::vector<Request> requests;
  int error = 0;
  std::string message;
  size_t consumed = 0;
};

void check_request(const Request& r, const ParseLimits& l) {
  if (r.body.size() > l.max_body_bytes) throw FuzzBug("a body past the limit was accepted");
  if (r.headers.size() > l.max_headers) throw FuzzBug("more header fields than the limit");
  size_t head = r.target.size() + r.method.size();
  for (const auto& [k, v] : r.headers) head += k.size() + v.size();
  if (head > l.max_head_bytes) throw FuzzBug("a head past the limit was accepted");
  if (r.method.empty() || r.path.empty()) throw FuzzBug("a request without method or path");
  if (r.path[0] != '/' && r.path != "*") throw FuzzBug("a path that is not a path: " + r.path);
  if (r.minor_version != 0 && r.minor_version != 1) throw FuzzBug("an HTTP version not 1.x");
}

// Feeds `data` in pieces whose sizes cycle through `steps` (empty: all at once).
Outcome run(std::string_view data, const std::vector<size_t>& steps) {
  const ParseLimits l = limits();
  RequestParser p(l);
  Outcome out;
  std::string buf;
  size_t fed = 0, step = 0;
  while (true) {
    size_t used = 0;
    const auto st = p.feed(buf, used);
    if (used > buf.size()) throw FuzzBug("the parser consumed more than it was given");
    buf.erase(0, used);
    out.consumed += used;
    if (st == RequestParser::Status::Complete) {
      check_request(p.request(), l);
      out.requests.push_back(p.request());
      p.reset();
      continue;
    }
    if (st == RequestParser::Status::Error) {
      out.error = p.error().status;
      out.message = p.error().message;
      return out;
    }
    if (st == RequestParser::Status::HeadComplete) {
      if (p.request().method.empty()) throw FuzzBug("a head without a request line");
      continue;
    }
    // NeedMore takes everything it was given (what it keeps of it is its own, bounded).
    if (!buf.empty())
      throw FuzzBug("NeedMore left " + std::to_string(buf.size()) + " bytes unconsumed");
    if (fed == data.size()) return out;
    const size_t n = steps.empty() ? data.size() - fed
                                   : std::min(steps[step++ % steps.size()], data.size() - fed);
    buf.append(data.substr(fed, n));
    fed += n;
  }
}

bool same(const Outcome& a, const Outcome& b) {
  // Where a refusal stops differs (a split stops inside its piece); everything else may not.
  if (a.error != b.error || a.message != b.message || a.requests.size() != b.requests.size() ||
      (!a.error && a.consumed != b.consumed))
    return false;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const Request &x = a.requests[i], &y = b.requests[i];
    if (x.method != y.method || x.target != y.target || x.path != y.path || x.query != y.query ||
        x.headers != y.headers || x.body != y.body || x.minor_version != y.minor_version)
      return false;
  }
  return true;
}

}  // namespace

bool http_request(std::string_view data) {
  if (data.empty()) return false;
  // The first byte picks the reads: 1, 2, 3 ... bytes at a time, or a cycle of uneven ones.
  const uint8_t pick = uint8_t(data[0]);
  data.remove_prefix(1);
  std::vector<size_t> steps;
  if (pick < 128)
    steps = {size_t(pick % 16) + 1};
  else
    steps = {size_t(pick % 7) + 1, size_t(pick % 5) + 13, 1, size_t(pick % 61) + 2};
  const Outcome whole = run(data, {});
  const Outcome split = run(data, steps);
  if (!same(whole, split))
    throw FuzzBug("the outcome depends on how the bytes were split (whole: " +
                  std::to_string(whole.requests.size()) + " requests, error " +
                  std::to_string(whole.error) + " '" + whole.message +
                  "'; split: " + std::to_string(split.requests.size()) + " requests, error " +
                  std::to_string(split.error) + " '" + split.message + "')");
  static const std::set<int> statuses = {400, 413, 414, 417, 431, 501, 505};
  if (whole.error) {
    if (!statuses.count(whole.error))
      throw FuzzBug("refused with status " + std::to_string(whole.error));
    if (whole.message.empty()) throw FuzzBug("a refusal without a message");
    for (char c : whole.message)
      if (uint8_t(c) < 0x20 || uint8_t(c) >= 0x7f)
        throw FuzzBug("a refusal message with a byte that is not printable ASCII");
  }
  return !whole.requests.empty();
}

}  // namespace hearth::fuzz
