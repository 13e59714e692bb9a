// Tensor-parallel ranks as processes behind the gateway (issue 26): a profile with
// tensor_parallel_processes on a gateway sharding the default model for 2 ranks runs its worker
// as rank 0 and a hearth-tp-follower as rank 1, each importing its own rank's pieces, and gives
// the tokens and logprobs of the in-process TP=2 profile. SIGKILL the follower while the worker is
// idle: the worker notices with no request sent and exits (its idle probe; a request in flight
// instead fails naming the rank: tests/worker/tp/tp_serve_test.cc), the gateway starts it again
// (a new group) for the next request, which gives the same tokens as before.
#include <signal.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/gateway/gateway_process.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {
namespace {

std::filesystem::path write_profile(const TempDir& dir, const std::string& name, bool processes) {
  const auto file = dir / (name + ".json");
  std::ofstream(file) << json{
      {"name", name},
      {"tensor_parallel", 2},
      {"tensor_parallel_processes",
       processes}}.dump();
  return file;
}

GatewayProcess::Reply complete(const GatewayProcess& g, const std::string& model) {
  return g.post("/v1/completions", {{"model", model},
                                    {"prompt", "A computer"},
                                    {"max_tokens", 16},
                                    {"temperature", 0},
                                    {"logprobs", 1}});
}

// Every process below `pid` named hearth-tp-follower (comm is cut at 15 characters).
std::vector<pid_t> followers_below(pid_t pid) {
  std::vector<pid_t> out, todo = {pid};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    std::error_code ec;
    for (const auto& t :
         std::filesystem::directory_iterator("/proc/" + std::to_string(p) + "/task", ec)) {
      std::ifstream in(t.path() / "children");
      for (pid_t child; in >> child;) {
        todo.push_back(child);
        std::ifstream comm("/proc/" + std::to_string(child) + "/comm");
        std::string name;
        std::getline(comm, name);
        if (name.rfind("hearth-tp-follo", 0) == 0) out.push_back(child);
      }
    }
  }
  return out;
}

// The parent of `pid` (from /proc/<pid>/stat), 0 if it is gone.
pid_t parent_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 1));
  char state = 0;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

// True once `pid` has exited (a zombie its parent has not reaped yet counts as exited).
bool has_exited(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  return close == std::string::npos || text.compare(close + 1, 3, " Z ") == 0;
}

TEST(GatewayTpProcesses, AreTheInProcessRanksAndADeadFollowerRestartsTheGroup) {
  TempDir dir;
  GatewayProcess g({"--tensor-parallel", "2", "--profile",
                    "procs=" + write_profile(dir, "procs", true).string(), "--profile",
                    "inproc=" + write_profile(dir, "inproc", false).string()});
  const GatewayProcess::Reply first = complete(g, "fortunes:procs");
  ASSERT_EQ(first.status, 200) << first.body;
  const json want = first.parsed()["choices"][0];
  const GatewayProcess::Reply inproc = complete(g, "fortunes:inproc");
  ASSERT_EQ(inproc.status, 200) << inproc.body;
  EXPECT_EQ(inproc.parsed()["choices"][0]["logprobs"], want["logprobs"]);
  EXPECT_EQ(inproc.parsed()["choices"][0]["text"], want["text"]);

  const std::vector<pid_t> followers = followers_below(g.process().pid());
  ASSERT_EQ(followers.size(), 1u);
  const pid_t worker = parent_of(followers[0]);
  ASSERT_GT(worker, 0);
  ASSERT_FALSE(has_exited(worker));
  ASSERT_EQ(::kill(followers[0], SIGKILL), 0);
  // No request is sent until the worker is gone: it found the dead follower itself.
  for (int i = 0; i < 600 && !has_exited(worker); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(has_exited(worker)) << "the worker did not notice its dead follower\n"
                                  << g.log_text();
  // The gateway starts a new one (and with it a new follower) for the next request, which may be
  // told to retry while it starts.
  GatewayProcess::Reply again;
  for (int i = 0; i < 600 && again.status != 200; ++i) {
    again = complete(g, "fortunes:procs");
    if (again.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(again.status, 200) << again.body << "\n" << g.log_text();
  EXPECT_EQ(again.parsed()["choices"][0]["logprobs"], want["logprobs"]);
  const std::vector<pid_t> now = followers_below(g.process().pid());
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], followers[0]);
  EXPECT_NE(g.get("/metrics").body.find("hearth:worker_restarts_total 1"), std::string::npos);
  // The old worker exited as a failure (the dead follower), not idle or by a signal.
  EXPECT_NE(g.log_text().find("worker fortunes:procs exit status 1"), std::string::npos)
      << g.log_text();
}

}  // namespace
}  // namespace hearth::test
