// A non-streaming completion whose client leaves is cancelled in the worker, as a stream's is
// (vLLM aborts a request on disconnect either way). It once ran to its last token, and shutdown
// waited for it (up to --request-timeout-s): the whole-body handler never asked the socket.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "ipc/client.h"
#include "tests/gateway/gateway_process.h"
#include "tests/gateway/raw_http_client.h"

namespace hearth::test {
namespace {

using Clock = std::chrono::steady_clock;

// The gateway's one worker, asked directly over its own socket (from its command line).
struct WorkerOf {
  pid_t pid = 0;
  std::string socket;
};

WorkerOf worker_of(const GatewayProcess& gw) {
  const std::string log = gw.log_text();
  const std::string started = "worker fortunes started (pid ";
  const size_t at = log.find(started);
  if (at == std::string::npos) throw std::runtime_error("no worker started: " + log);
  WorkerOf w;
  w.pid = std::stoi(log.substr(at + started.size()));
  std::ifstream cmdline("/proc/" + std::to_string(w.pid) + "/cmdline");
  std::vector<std::string> args;
  for (std::string arg; std::getline(cmdline, arg, '\0');) args.push_back(arg);
  const auto serve = std::find(args.begin(), args.end(), "--serve");
  if (serve == args.end() || serve + 1 == args.end())
    throw std::runtime_error("the worker has no --serve socket");
  w.socket = *(serve + 1);
  return w;
}

// Polls the worker's stats until `until` holds (or a minute passes); the last stats.
template <typename Pred>
json worker_stats_until(ipc::Client& worker, Pred until) {
  json stats;
  for (int tries = 0; tries < 6000; ++tries) {
    stats = worker.call("stats").body;
    if (until(stats)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return stats;
}

// A whole-response request of 480 tokens (`prompt`), sent raw on `client`; returns once the
// worker (`worker`: connected to it directly) runs it.
void start_long_request(ipc::Client& worker, RawClient& client, const std::string& prompt) {
  const std::string body = json{
      {"model", "fortunes"},
      {"prompt", prompt},
      {"max_tokens", 480},
      {"ignore_eos", true},
      {"stream", false}}.dump();
  ASSERT_TRUE(
      client.send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Content-Type: application/json\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n" + body));
  const json stats = worker_stats_until(worker, [](const json& s) { return s["running"] == 1; });
  ASSERT_EQ(stats["running"], 1) << stats.dump();
}

// The gateway's worker, warmed up by one request, and a client connected to it directly.
struct WarmWorker {
  WorkerOf w;
  ipc::Client client;
};
WarmWorker warm_worker(GatewayProcess& gw) {
  EXPECT_EQ(
      gw.post("/v1/completions", {{"model", "fortunes"}, {"prompt", "Warm"}, {"max_tokens", 1}})
          .status,
      200);
  const WorkerOf w = worker_of(gw);
  ipc::ClientOptions options;
  options.name = "test";
  return {w, ipc::Client::connect(w.socket, options)};
}

TEST(GatewayClientGone, AWholeResponseRequestIsCancelledAtTheWorkerWhenItsClientLeaves) {
  GatewayProcess gw;
  WarmWorker warm = warm_worker(gw);
  const WorkerOf& w = warm.w;
  ipc::Client& worker = warm.client;
  RawClient client(gw.port());
  start_long_request(worker, client, "Left");
  if (HasFatalFailure()) return;
  // The worker is held (SIGSTOP) while the client leaves, so its 480 tokens cannot run out
  // before the gateway notices: only a cancel can end the request short of them.
  ASSERT_EQ(::kill(w.pid, SIGSTOP), 0);
  client.close();
  std::this_thread::sleep_for(std::chrono::seconds(1));  // a head start for the cancel
  ASSERT_EQ(::kill(w.pid, SIGCONT), 0);

  const json stats = worker_stats_until(worker, [](const json& s) { return s["finished"] == 2; });
  EXPECT_EQ(stats["finished"], 2) << stats.dump();
  EXPECT_EQ(stats["aborted"], 1) << stats.dump();  // ended by the cancel, not by running out
  EXPECT_EQ(stats["running"], 0) << stats.dump();
  EXPECT_LT(stats["generated_tokens"].get<int>(), 1 + 480) << stats.dump();
  // And the gateway serves on.
  EXPECT_EQ(gw.post("/v1/completions", {{"model", "fortunes"}, {"prompt", "A"}, {"max_tokens", 2}})
                .status,
            200);
}

// SIGTERM while a whole-response request waits on a worker that cannot answer (SIGSTOP): the
// gateway stops its HTTP side at once, cancelling the request, and exits 0. It once waited for
// the request's --request-timeout-s (300 s here) first.
TEST(GatewayClientGone, SigtermDoesNotWaitForAWholeResponseRequest) {
  GatewayProcess gw({"--request-timeout-s", "300"});
  WarmWorker warm = warm_worker(gw);
  const WorkerOf& w = warm.w;
  RawClient client(gw.port());
  start_long_request(warm.client, client, "Stuck");
  if (HasFatalFailure()) return;
  ASSERT_EQ(::kill(w.pid, SIGSTOP), 0);  // the request can end only by the gateway's doing now

  gw.process().signal(SIGTERM);
  // Far less than the request's 300 s: a gateway that waits for it fails here.
  const auto status = gw.process().wait_until(Clock::now() + std::chrono::seconds(60));
  ::kill(w.pid, SIGCONT);  // if it is still there
  ASSERT_TRUE(status) << "the gateway waited for the request\n" << gw.log_text();
  EXPECT_TRUE(status->exited_with(0)) << status->describe() << "\n" << gw.log_text();
  EXPECT_TRUE(client.closed_by_server());
}

}  // namespace
}  // namespace hearth::test
