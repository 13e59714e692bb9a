// hearth-gateway's HTTP transport end to end (issue 21, defects 4 and 5, and the conformance
// issue's transport cases): a real gateway, raw bytes on 127.0.0.1. cpp-httplib, which served
// the gateway before, answered only the first of pipelined requests, read chunked bodies whole
// past --max-body-mb, answered GET on a POST route with 404 and an 8 KiB header with 400.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "tests/gateway/gateway_process.h"
#include "tests/gateway/shared_gateway.h"
#include "tests/gateway/raw_http_client.h"

namespace hearth::test {
namespace {

class GatewayTransport : public SharedGatewayTest {
 protected:
  static void SetUpTestSuite() { gateway_ = new GatewayProcess({"--max-body-mb", "1"}); }
};

// kB from /proc/PID/status ("VmRSS", "VmHWM").
long status_kb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

void expect_pipelined(int port, int n) {
  RawClient c(port);
  std::string all;
  for (int i = 0; i < n; ++i) all += "GET /health HTTP/1.1\r\nHost: t\r\n\r\n";
  const std::string body = R"({"model":"fortunes","prompt":"A computer"})";
  all +=
      "POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_TRUE(c.send(all));
  for (int i = 0; i < n; ++i) {
    const auto r = c.response();
    ASSERT_TRUE(r) << "response " << i << " of " << n << " never came";
    EXPECT_EQ(r->status, 200);
  }
  const auto r = c.response();
  ASSERT_TRUE(r) << "the pipelined /tokenize was not answered";
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->body.find("\"tokens\""), std::string::npos) << r->body;
}

TEST_F(GatewayTransport, PipelinedRequestsAreAllAnsweredInOrder) {
  expect_pipelined(gw().port(), 4);
  expect_pipelined(gw().port(), 201);
}

TEST_F(GatewayTransport, AChunkedBodyOverMaxBodyGets413WithoutBeingRead) {
  const pid_t pid = gw().process().pid();
  const long rss_before = status_kb(pid, "VmRSS");
  RawClient c(gw().port());
  ASSERT_TRUE(
      c.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             "Transfer-Encoding: chunked\r\n\r\n"));
  // Up to 64 MiB in 64 KiB chunks, until the gateway stops taking them.
  std::thread sender([&] {
    const std::string chunk = "10000\r\n" + std::string(65536, ' ') + "\r\n";
    for (int i = 0; i < 1024; ++i)
      if (!c.send(chunk)) return;
  });
  const auto r = c.response();
  ::shutdown(c.fd(), SHUT_RDWR);
  sender.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413) << r->body;
  const json e = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(e.is_object()) << r->body;
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("larger than 1048576"),
            std::string::npos);
  // The gateway's peak memory grew by less than the body it was sent (64 MiB).
  EXPECT_LT(status_kb(pid, "VmHWM") - rss_before, 16 * 1024);
  EXPECT_EQ(gw().get("/health").status, 200);
}

TEST_F(GatewayTransport, AnotherMethodOnAKnownPathIs405WithAllow) {
  const auto r = gw().get("/v1/completions");
  EXPECT_EQ(r.status, 405) << r.body;
  EXPECT_EQ(r.headers.find("Allow")->second, "POST");
  EXPECT_EQ(r.parsed()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(gw().get("/v1/nothing").status, 404);
}

TEST_F(GatewayTransport, LargeHeadersAre431AndEightKiBIsFine) {
  const auto ok = gw().get("/health", {{"X-Big", std::string(8192, 'a')}});
  EXPECT_EQ(ok.status, 200);
  const auto big = gw().get("/health", {{"X-Big", std::string(20000, 'a')}});
  EXPECT_EQ(big.status, 431) << big.body;
  EXPECT_EQ(big.parsed()["error"]["type"], "invalid_request_error");
}

TEST_F(GatewayTransport, ExpectContinueBodiesAreServed) {
  RawClient c(gw().port());
  // Over 1 KiB (curl asks to continue past that): the prompt padded with JSON whitespace.
  const std::string body = R"({"model":"fortunes","prompt":"A computer",)" +
                           std::string(1500, ' ') + R"("max_tokens":1})";
  ASSERT_TRUE(
      c.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             "Expect: 100-continue\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n"));
  const auto interim = c.head(std::chrono::steady_clock::now() + RawClient::kPatience);
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.send(body));
  const auto r = c.response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace hearth::test
