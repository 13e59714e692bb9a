// A serving worker (hearth-worker --serve) whose tensor-parallel follower is SIGKILLed (issue
// 26): while a request runs, the request ends with an error event naming the rank and the
// signal; while the worker is idle, it notices without any request. Either way the worker stops
// by itself, exiting as a failure that says why, so whoever supervises it can start the group
// again.
#include <gtest/gtest.h>

#include <signal.h>

#include <fstream>
#include <thread>

#include "ipc/client.h"
#include "tests/support/child_pids.h"
#include "tests/weight-server/daemon/server_test_support.h"

namespace hearth {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

// A CPU TP=2 worker with its follower as a process, serving on a socket in `dir`, and a client
// connected to it (so it has loaded and listens).
struct ServingTpWorker {
  ChildProcess process;
  std::optional<ipc::Client> client;
  pid_t follower = 0;
};

ServingTpWorker start_worker(const test::TempDir& dir) {
  std::filesystem::create_directories(dir / "sock");
  std::filesystem::permissions(dir / "sock", std::filesystem::perms::owner_all);
  const std::string socket = (dir / "sock" / "worker.sock").string();
  ServingTpWorker w{
      ChildProcess::spawn(
          ChildProcess::Options({test::binary("hearth-worker"), "--model",
                                 test::tiny_model_dir().string(), "--backend", "cpu", "--serve",
                                 socket, "--quiet", "--set", "tensor_parallel=2", "--set",
                                 "tensor_parallel_processes=true"})
              .stderr_to(ChildProcess::Stream::file(dir / "worker.err"))),
      {},
      0};
  for (int i = 0; i < 3000 && !w.client; ++i) {
    if (w.process.wait_until(std::chrono::steady_clock::now()))
      throw std::runtime_error("the worker exited: " + test::read_file(dir / "worker.err"));
    try {
      ipc::ClientOptions options;
      options.name = "test";
      options.timeout = 120s;
      w.client.emplace(ipc::Client::connect(socket, options));
    } catch (const ipc::IpcError&) {
      std::this_thread::sleep_for(10ms);
    }
  }
  if (!w.client) throw std::runtime_error("the worker did not listen");
  const std::vector<pid_t> followers = test::children_of(w.process.pid());
  if (followers.size() != 1) throw std::runtime_error("not one follower");
  w.follower = followers[0];
  return w;
}

// The worker exits as a failure and its stderr says the follower was killed.
void expect_stopped_naming(ServingTpWorker& w, const test::TempDir& dir) {
  const auto status = w.process.wait_until(std::chrono::steady_clock::now() + 60s);
  ASSERT_TRUE(status) << "the worker did not stop";
  EXPECT_FALSE(status->success());
  const std::string err = test::read_file(dir / "worker.err");
  EXPECT_NE(err.find("tensor-parallel rank 1 (pid " + std::to_string(w.follower) + ")"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("killed by signal 9"), std::string::npos) << err;
}

TEST(TpServe, AKilledFollowerEndsTheRequestWithAnErrorAndTheWorkerStops) {
  test::TempDir dir;
  ServingTpWorker w = start_worker(dir);
  w.client->call(
      "submit",
      {{"request",
        {{"id", "long"}, {"prompt", "A computer"}, {"max_tokens", 400}, {"ignore_eos", true}}}});
  ASSERT_FALSE(w.client->call("events").body["events"].empty());  // it is running
  ASSERT_EQ(::kill(w.follower, SIGKILL), 0);
  json last;
  for (int i = 0; i < 1000 && !last.contains("done"); ++i) {
    const json events = w.client->call("events").body["events"];
    ASSERT_FALSE(events.empty()) << "no final event";
    last = events.back();
  }
  EXPECT_EQ(last["stop"], "error");
  const std::string error = last.value("error", "");
  EXPECT_NE(error.find("tensor-parallel rank 1 (pid " + std::to_string(w.follower) + ")"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("killed by signal 9"), std::string::npos) << error;
  w.client.reset();
  expect_stopped_naming(w, dir);
}

// No request is sent: the worker's idle probe is what finds the dead follower, so its supervisor
// restarts the group before anyone asks (a request would otherwise meet the broken group first).
TEST(TpServe, AFollowerKilledWhileIdleStopsTheWorkerWithoutARequest) {
  test::TempDir dir;
  ServingTpWorker w = start_worker(dir);
  w.client.reset();
  ASSERT_EQ(::kill(w.follower, SIGKILL), 0);
  expect_stopped_naming(w, dir);
}

}  // namespace
}  // namespace hearth
