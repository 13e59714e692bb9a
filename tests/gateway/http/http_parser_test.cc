// hearth's HTTP/1.1 request parser and chunked decoder on bytes alone: what each malformed or
// oversized input is refused with, that limits hold before the bytes past them are taken, and
// that splitting the input anywhere changes nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gateway/http/chunked_decoder.h"
#include "gateway/http/request_parser.h"

namespace hearth::http {
namespace {

struct Parsed {
  std::vector<Request> requests;
  int error = 0;  // the status of the refusal, 0 when none
  std::string message;
  size_t consumed = 0;  // bytes the parser took
};

// Feeds `data` in pieces of `step` bytes (0: all at once), as a connection's reads would.
Parsed parse(const std::string& data, size_t step = 0, ParseLimits limits = {}) {
  RequestParser p(limits);
  Parsed out;
  std::string buf;
  size_t fed = 0;
  while (true) {
    size_t used = 0;
    const auto st = p.feed(buf, used);
    buf.erase(0, used);
    out.consumed += used;
    if (st == RequestParser::Status::Complete) {
      out.requests.push_back(p.request());
      p.reset();
      continue;
    }
    if (st == RequestParser::Status::Error) {
      out.error = p.error().status;
      out.message = p.error().message;
      return out;
    }
    if (st == RequestParser::Status::HeadComplete) continue;
    if (fed == data.size()) return out;
    const size_t n = step == 0 ? data.size() - fed : std::min(step, data.size() - fed);
    buf += data.substr(fed, n);
    fed += n;
  }
}

int refusal(const std::string& data, ParseLimits limits = {}) {
  return parse(data, 0, limits).error;
}

TEST(HttpParser, ParsesARequestWithQueryHeadersAndBody) {
  const Parsed r = parse(
      "POST /v1/completions?x=1&y=2 HTTP/1.1\r\nHost: h\r\ncontent-LENGTH: 5\r\n"
      "X-Thing:   spaced value \t\r\n\r\nhello");
  ASSERT_EQ(r.error, 0) << r.message;
  ASSERT_EQ(r.requests.size(), 1u);
  const Request& q = r.requests[0];
  EXPECT_EQ(q.method, "POST");
  EXPECT_EQ(q.path, "/v1/completions");
  EXPECT_EQ(q.query, "x=1&y=2");
  EXPECT_EQ(q.get_header_value("x-thing"), "spaced value");
  EXPECT_EQ(q.get_header_value("Content-Length"), "5");
  EXPECT_EQ(q.body, "hello");
}

TEST(HttpParser, PipelinedRequestsComeOutInOrderWhateverTheSplit) {
  std::string data;
  for (int i = 0; i < 5; ++i)
    data += "POST /r" + std::to_string(i) + " HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\n" +
            std::to_string(i);
  data +=
      "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\nGET /last HTTP/1.1\r\nHost: h\r\n\r\n";
  for (size_t step : {0, 1, 2, 3, 7, 64}) {
    const Parsed r = parse(data, step);
    ASSERT_EQ(r.error, 0) << "step " << step << ": " << r.message;
    ASSERT_EQ(r.requests.size(), 7u) << "step " << step;
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(r.requests[size_t(i)].path, "/r" + std::to_string(i));
      EXPECT_EQ(r.requests[size_t(i)].body, std::to_string(i));
    }
    EXPECT_EQ(r.requests[5].body, "abcde");
    EXPECT_EQ(r.requests[6].path, "/last");
    EXPECT_EQ(r.consumed, data.size());
  }
}

TEST(HttpParser, RefusesMalformedRequestLines) {
  EXPECT_EQ(refusal("GARBAGE\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET  / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET / HTTP/1.1 extra\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(refusal("G(T / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET nopath HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET /\x01 HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET / HTTX/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
  EXPECT_EQ(refusal("GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n"), 414);
}

// Binary input (a TLS ClientHello, a stray protocol) is refused at its first impossible byte,
// whatever the split, with no line end ever sent; empty lines (CRLF) before a request still pass.
TEST(HttpParser, BinaryBeforeAnyLineEndIsRefusedAtOnce) {
  const std::string hello("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
  for (size_t step : {0, 1, 3}) {
    const Parsed r = parse(hello, step);
    EXPECT_EQ(r.error, 400) << "step " << step;
    EXPECT_NE(r.message.find("0x16 at offset 0"), std::string::npos) << r.message;
  }
  const Parsed utf8 = parse("GET /caf\xc3\xa9", 4);
  EXPECT_EQ(utf8.error, 400);
  EXPECT_NE(utf8.message.find("0xc3 at offset 8"), std::string::npos) << utf8.message;
  EXPECT_EQ(parse("GET / HT\rTP/1.1", 2).error, 400);
  const Parsed ok = parse("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", 1);
  EXPECT_EQ(ok.error, 0) << ok.message;
  EXPECT_EQ(ok.requests.size(), 1u);
}

TEST(HttpParser, RefusesMalformedHeaders) {
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nHost: h\r\nNo colon here\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nHost: h\r\nBad Name: x\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nHost: h\r\nName : x\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nHost: h\r\nA: x\r\n folded\r\n\r\n"), 400);
  EXPECT_EQ(refusal(std::string("GET / HTTP/1.1\r\nHost: h\r\nA: x\0y\r\n\r\n", 33)), 400);
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nHost: h\r\nA: x\ry\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\n\r\n"), 400);                        // no Host
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);  // two
  EXPECT_EQ(refusal("GET / HTTP/1.0\r\n\r\n"), 0);                          // 1.0 needs none
}

TEST(HttpParser, RefusesBadContentLengthAndTransferEncoding) {
  const std::string head = "POST / HTTP/1.1\r\nHost: h\r\n";
  EXPECT_EQ(refusal(head + "Content-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(refusal(head + "Content-Length: +5\r\n\r\n"), 400);
  EXPECT_EQ(refusal(head + "Content-Length: 5x\r\n\r\n"), 400);
  EXPECT_EQ(refusal(head + "Content-Length:\r\n\r\n"), 400);
  EXPECT_EQ(refusal(head + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n"), 400);
  EXPECT_EQ(refusal(head + "Content-Length: 5, 6\r\n\r\n"), 400);
  EXPECT_EQ(refusal(head + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(refusal(head + "Transfer-Encoding: gzip\r\n\r\n"), 501);
  EXPECT_EQ(refusal(head + "Transfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(refusal(head + "Transfer-Encoding: chunked, chunked\r\n\r\n"), 400);
  EXPECT_EQ(refusal("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(refusal(head + "Expect: something-else\r\n\r\n"), 417);
  // The same length twice is one length.
  const Parsed same = parse(head + "Content-Length: 2\r\nContent-Length: 2\r\n\r\nok");
  ASSERT_EQ(same.error, 0) << same.message;
  EXPECT_EQ(same.requests.at(0).body, "ok");
}

TEST(HttpParser, ContentLengthOverTheLimitIsRefusedBeforeTheBody) {
  ParseLimits limits;
  limits.max_body_bytes = 1000;
  const std::string head = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n";
  const Parsed r = parse(head + std::string(1001, 'x'), 0, limits);
  EXPECT_EQ(r.error, 413);
  EXPECT_LE(r.consumed, head.size());
  EXPECT_EQ(
      refusal("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
      413);
}

TEST(HttpParser, ChunkedBodyOverTheLimitIsRefusedBeforeItsData) {
  ParseLimits limits;
  limits.max_body_bytes = 1000;
  const std::string head = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  // One chunk declaring more than the limit: refused on its size line.
  Parsed r = parse(head + "8000000\r\n" + std::string(5000, 'x'), 0, limits);
  EXPECT_EQ(r.error, 413) << r.message;
  EXPECT_LE(r.consumed, head.size() + 9);
  // Small chunks adding up past it: refused at the first chunk that would pass it.
  std::string body;
  for (int i = 0; i < 20; ++i) body += "64\r\n" + std::string(100, 'y') + "\r\n";
  r = parse(head + body, 0, limits);
  EXPECT_EQ(r.error, 413);
  EXPECT_LE(r.consumed, head.size() + 10 * (104 + 2) + 4);
  // Exactly the limit is fine.
  r = parse(head + "3e8\r\n" + std::string(1000, 'z') + "\r\n0\r\n\r\n", 0, limits);
  ASSERT_EQ(r.error, 0) << r.message;
  EXPECT_EQ(r.requests.at(0).body.size(), 1000u);
}

TEST(HttpParser, RefusesMalformedChunks) {
  const std::string head = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(refusal(head + "zz\r\n"), 400);
  EXPECT_EQ(refusal(head + "\r\n"), 400);
  EXPECT_EQ(refusal(head + "-1\r\n"), 400);
  EXPECT_EQ(refusal(head + "3 x\r\nabc\r\n"), 400);
  EXPECT_EQ(refusal(head + "3\r\nabcd\r\n"), 400);          // data longer than declared
  EXPECT_EQ(refusal(head + "11111111111111111\r\n"), 400);  // 17 hex digits
  EXPECT_EQ(refusal(head + "1;" + std::string(2000, 'e') + "\r\n"), 400);
  EXPECT_EQ(refusal(head + "0\r\nbad trailer\r\n\r\n"), 400);
  std::string trailers;
  for (int i = 0; i < 2000; ++i) trailers += "T: v\r\n";
  EXPECT_EQ(refusal(head + "0\r\n" + trailers), 400);  // trailer section bounded
}

TEST(HttpParser, OversizedHeadsAre431) {
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(17000, 'a') + "\r\n\r\n"),
            431);
  // Without a line end: refused once the limit is passed, not when the line ends.
  const Parsed r = parse("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(17000, 'a'), 100);
  EXPECT_EQ(r.error, 431);
  EXPECT_LE(r.consumed, 16384u);
  std::string many = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (int i = 0; i < 100; ++i) many += "H" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(refusal(many + "\r\n"), 431);
  const Parsed ok = parse("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(8000, 'a') + "\r\n\r\n");
  EXPECT_EQ(ok.error, 0) << ok.message;
}

TEST(HttpParser, KeepAliveFollowsVersionAndConnection) {
  const auto keep = [](const std::string& data) {
    RequestParser p({});
    size_t pos = 0;
    while (true) {
      size_t used = 0;
      const auto st = p.feed(std::string_view(data).substr(pos), used);
      pos += used;
      if (st != RequestParser::Status::HeadComplete) break;
    }
    return p.keep_alive();
  };
  EXPECT_TRUE(keep("GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(keep("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
}

TEST(HttpParser, ExpectContinueOnlyWithABody) {
  RequestParser p({});
  size_t used = 0;
  ASSERT_EQ(
      p.feed("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n",
             used),
      RequestParser::Status::HeadComplete);
  EXPECT_TRUE(p.expects_continue());
  p.reset();
  ASSERT_EQ(p.feed("GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n", used),
            RequestParser::Status::HeadComplete);
  EXPECT_FALSE(p.expects_continue());
}

TEST(HttpParser, AcceptsAbsoluteFormAndBareLineFeeds) {
  Parsed r = parse("GET http://example.com/a/b?q HTTP/1.1\r\nHost: example.com\r\n\r\n");
  ASSERT_EQ(r.error, 0) << r.message;
  EXPECT_EQ(r.requests.at(0).path, "/a/b");
  EXPECT_EQ(r.requests.at(0).query, "q");
  r = parse("\r\nGET /x HTTP/1.1\nHost: h\n\n");
  ASSERT_EQ(r.error, 0) << r.message;
  EXPECT_EQ(r.requests.at(0).path, "/x");
}

}  // namespace
}  // namespace hearth::http
