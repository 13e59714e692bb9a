// A serving worker (hearth-worker --serve) whose tensor-parallel follower is SIGKILLed while a
// request runs (issue 26): the request ends with an error event naming the rank and the signal,
// and the worker stops by itself, exiting as a failure that says why, so whoever supervises it
// can start the group again.
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

TEST(TpServe, AKilledFollowerEndsTheRequestWithAnErrorAndTheWorkerStops) {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "sock");
  std::filesystem::permissions(dir / "sock", std::filesystem::perms::owner_all);
  const std::string socket = (dir / "sock" / "worker.sock").string();
  ChildProcess worker = ChildProcess::spawn(
      ChildProcess::Options({test::binary("hearth-worker"), "--model",
                             test::tiny_model_dir().string(), "--backend", "cpu", "--serve", socket,
                             "--quiet", "--set", "tensor_parallel=2", "--set",
                             "tensor_parallel_processes=true"})
          .stderr_to(ChildProcess::Stream::file(dir / "worker.err")));
  std::optional<ipc::Client> client;
  for (int i = 0; i < 3000 && !client; ++i) {
    ASSERT_FALSE(worker.wait_until(std::chrono::steady_clock::now()))
        << test::read_file(dir / "worker.err");
    try {
      ipc::ClientOptions options;
      options.name = "test";
      options.timeout = 120s;
      client.emplace(ipc::Client::connect(socket, options));
    } catch (const ipc::IpcError&) {
      std::this_thread::sleep_for(10ms);
    }
  }
  ASSERT_TRUE(client) << "the worker did not listen";
  const std::vector<pid_t> followers = test::children_of(worker.pid());
  ASSERT_EQ(followers.size(), 1u);
  client->call(
      "submit",
      {{"request",
        {{"id", "long"}, {"prompt", "A computer"}, {"max_tokens", 400}, {"ignore_eos", true}}}});
  ASSERT_FALSE(client->call("events").body["events"].empty());  // it is running
  ASSERT_EQ(::kill(followers[0], SIGKILL), 0);
  json last;
  for (int i = 0; i < 1000 && !last.contains("done"); ++i) {
    const json events = client->call("events").body["events"];
    ASSERT_FALSE(events.empty()) << "no final event";
    last = events.back();
  }
  EXPECT_EQ(last["stop"], "error");
  const std::string error = last.value("error", "");
  EXPECT_NE(error.find("tensor-parallel rank 1 (pid " + std::to_string(followers[0]) + ")"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("killed by signal 9"), std::string::npos) << error;
  client.reset();
  const auto status = worker.wait_until(std::chrono::steady_clock::now() + 60s);
  ASSERT_TRUE(status) << "the worker did not stop";
  EXPECT_FALSE(status->success());
  EXPECT_NE(test::read_file(dir / "worker.err").find("killed by signal 9"), std::string::npos)
      << test::read_file(dir / "worker.err");
}

}  // namespace
}  // namespace hearth
