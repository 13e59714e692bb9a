// A gateway killed outright (SIGKILL: no destructor, no signal handler runs) takes its weight
// server and workers with it, and its runtime directory goes too (issue 21, defect 2). A gateway
// stopped by SIGTERM while a stream its client dropped is still ending exits cleanly.
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "base/unique_fd.h"
#include "tests/gateway/gateway_process.h"
#include "tests/gateway/raw_http_client.h"
#include "tests/ipc/test_util.h"

namespace hearth::test {
namespace {

using Clock = std::chrono::steady_clock;

// The processes whose parent is `parent` (from /proc/PID/stat), by pid, with their names.
std::map<pid_t, std::string> children_of(pid_t parent) {
  std::map<pid_t, std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid == parent) out[pid_t(std::stoi(name))] = stat.substr(open + 1, close - open - 1);
  }
  return out;
}

int remaining_ms(Clock::time_point deadline) {
  return int(std::max<long long>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
}

TEST(GatewayLifetime, SigkilledGatewayTakesItsChildrenAndRuntimeDirectory) {
  TempDir under;
  GatewayProcess gateway({"--runtime-dir", under.path()});
  // A completion, so that a worker runs beside the weight server.
  const auto reply =
      gateway.post("/v1/completions", {{"model", "fortunes"}, {"prompt", "A"}, {"max_tokens", 1}});
  ASSERT_EQ(reply.status, 200) << reply.body;

  std::filesystem::path runtime;
  for (const auto& entry : std::filesystem::directory_iterator(under.path())) runtime = entry;
  ASSERT_FALSE(runtime.empty()) << "no runtime directory under " << under.path();
  const UniqueFd watch(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  ASSERT_TRUE(watch);
  ASSERT_GE(::inotify_add_watch(watch.get(), under.path().c_str(), IN_DELETE), 0);

  const std::map<pid_t, std::string> children = children_of(gateway.process().pid());
  std::map<pid_t, UniqueFd> exits;
  bool server = false, worker = false;
  for (const auto& [pid, name] : children) {
    server |= name == "hearth-server";
    worker |= name == "hearth-worker";
    const long fd = ::syscall(SYS_pidfd_open, pid, 0);
    if (fd >= 0) exits[pid] = UniqueFd(int(fd));
  }
  ASSERT_TRUE(server && worker) << "expected a weight server and a worker among " << children.size()
                                << " children";

  gateway.process().signal(SIGKILL);
  ASSERT_TRUE(gateway.process().wait_until(Clock::now() + std::chrono::seconds(30)));

  // Each child's exit, waited on through its pidfd (readable once it has exited).
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (const auto& [pid, fd] : exits) {
    pollfd p{fd.get(), POLLIN, 0};
    const bool exited = ::poll(&p, 1, remaining_ms(deadline)) == 1;
    if (!exited) ::kill(pid, SIGKILL);  // leave nothing behind for the next test
    EXPECT_TRUE(exited) << children.at(pid) << " (pid " << pid << ") outlived the gateway";
  }
  // The directory's removal, waited on through inotify on its parent.
  while (std::filesystem::exists(runtime)) {
    pollfd p{watch.get(), POLLIN, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) != 1) break;
    char events[4096];
    while (::read(watch.get(), events, sizeof events) > 0) {
    }
  }
  EXPECT_FALSE(std::filesystem::exists(runtime)) << runtime << " outlived the gateway";
}

// The dropped stream's end (its cancel, then the worker's last events) comes in while the
// gateway stops its workers, and records the request's metrics: they must still be there (they
// were destroyed before the worker pool: SIGSEGV or SIGFPE in prometheus).
TEST(GatewayLifetime, SigtermRightAfterAClientDroppedItsStreamExitsCleanly) {
  GatewayProcess gateway;
  RawClient client(gateway.port());
  const std::string body =
      json{{"model", "fortunes"}, {"prompt", "Never"}, {"max_tokens", 64}, {"stream", true}}.dump();
  ASSERT_TRUE(
      client.send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Content-Type: application/json\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n" + body));
  const auto deadline = Clock::now() + RawClient::kPatience;
  const auto head = client.head(deadline);
  ASSERT_TRUE(head) << gateway.log_text();
  ASSERT_EQ(head->status, 200);
  ASSERT_TRUE(client.chunk(deadline)) << "no first event";
  client.close();

  gateway.process().signal(SIGTERM);
  const ExitStatus status = gateway.process().wait();
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << "\n" << gateway.log_text();
}

}  // namespace
}  // namespace hearth::test
