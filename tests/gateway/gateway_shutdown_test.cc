// hearth-gateway stopped or losing a worker while its HTTP clients come and go: every way
// through must end in a clean exit (status 0; under the sanitizer build, no report), and a
// worker that died is replaced for the next request. Each case is one the gateway's lifetimes
// decide: sessions ending on a worker connection's reader thread while the HTTP threads, the
// worker pool and the Metrics they record into go away (gateway/worker_pool.h says who owns
// what).
#include <signal.h>
#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/gateway/gateway_process.h"
#include "tests/gateway/raw_http_client.h"
#include "tests/proof/proof_test_util.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {
namespace {

using Clock = std::chrono::steady_clock;

std::string completion_request(bool stream, int max_tokens) {
  const std::string body = json{
      {"model", "fortunes"},
      {"prompt", "Never"},
      {"max_tokens", max_tokens},
      {"stream", stream}}.dump();
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
         "Content-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A stream whose head and first event have arrived: the request runs in a worker.
std::unique_ptr<RawClient> running_stream(const GatewayProcess& gateway) {
  auto client = std::make_unique<RawClient>(gateway.port());
  EXPECT_TRUE(client->send(completion_request(true, 200)));
  const auto deadline = Clock::now() + RawClient::kPatience;
  const auto head = client->head(deadline);
  EXPECT_TRUE(head && head->status == 200) << gateway.log_text();
  EXPECT_TRUE(client->chunk(deadline)) << "no first event\n" << gateway.log_text();
  return client;
}

// Closes with a reset (SO_LINGER 0) rather than a FIN: the gateway's next write fails at once.
void reset(RawClient& client) {
  const linger abort{1, 0};
  ::setsockopt(client.fd(), SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  client.close();
}

void expect_clean_exit(GatewayProcess& gateway) {
  gateway.process().signal(SIGTERM);
  const ExitStatus status = gateway.process().wait();
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << "\n" << gateway.log_text();
}

// SIGTERM while eight streams run: half of their clients have just left (four ways: closed,
// reset), the other half still read. Those are ended by the gateway, and it exits 0.
TEST(GatewayShutdown, SigtermWhileStreamsRunAndHalfTheirClientsLeave) {
  GatewayProcess gateway;
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(running_stream(gateway));
  for (size_t i = 0; i < clients.size(); i += 2) {
    if (i % 4 == 0)
      clients[i]->close();
    else
      reset(*clients[i]);
  }
  gateway.process().signal(SIGTERM);
  for (size_t i = 1; i < clients.size(); i += 2)
    EXPECT_TRUE(clients[i]->closed_by_server()) << "stream " << i << " was left open";
  const ExitStatus status = gateway.process().wait();
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << "\n" << gateway.log_text();
}

// The worker is SIGKILLed as its stream's client leaves: the session ends on the dead
// connection's reader, a request gets a new worker (the pool joins the old reader first; one
// sent before the gateway saw the death may get a retryable 503), and the gateway exits 0.
TEST(GatewayShutdown, AWorkerKilledAsItsClientLeavesIsReplaced) {
  TempDir under;
  GatewayProcess gateway({"--runtime-dir", under.path().string()});
  auto client = running_stream(gateway);
  const std::vector<pid_t> workers =
      proof::testing::processes_mentioning("--serve " + under.path().string());
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_EQ(::kill(workers[0], SIGKILL), 0);
  reset(*client);

  const json small = {{"model", "fortunes"}, {"prompt", "A"}, {"max_tokens", 4}};
  auto reply = gateway.post("/v1/completions", small);
  if (reply.status == 503) {
    // Sent before the gateway saw the worker's end: refused as retryable, and the connection
    // is known dead from then on.
    EXPECT_TRUE(reply.headers.count("Retry-After")) << reply.body;
    reply = gateway.post("/v1/completions", small);
  }
  EXPECT_EQ(reply.status, 200) << reply.body << "\n" << gateway.log_text();
  expect_clean_exit(gateway);
}

// Thirty-two clients that send a request and leave, streaming ones at once or once their
// heads arrive, the others at once (a whole response's head waits for its generation), some with
// a reset: the gateway still answers the next request, and exits 0 at SIGTERM while their ends
// may still be coming in.
TEST(GatewayShutdown, ManyAbruptDisconnectsThenSigterm) {
  GatewayProcess gateway;
  std::vector<std::unique_ptr<RawClient>> waiting;  // streams left after their heads arrived
  for (int i = 0; i < 32; ++i) {
    auto client = std::make_unique<RawClient>(gateway.port());
    const bool stream = i % 2 == 0;
    ASSERT_TRUE(client->send(completion_request(stream, 32)));
    if (stream && i % 4 == 2) {
      waiting.push_back(std::move(client));
    } else if (i % 8 < 4) {
      client->close();
    } else {
      reset(*client);
    }
  }
  for (size_t i = 0; i < waiting.size(); ++i) {
    EXPECT_TRUE(waiting[i]->head(Clock::now() + RawClient::kPatience)) << gateway.log_text();
    if (i % 2 == 0)
      waiting[i]->close();
    else
      reset(*waiting[i]);
  }
  const auto reply =
      gateway.post("/v1/completions", {{"model", "fortunes"}, {"prompt", "A"}, {"max_tokens", 4}});
  EXPECT_EQ(reply.status, 200) << reply.body;
  expect_clean_exit(gateway);
}

}  // namespace
}  // namespace hearth::test
