// The gateway's own weight server, supervised: a server that dies is restarted, and the
// supervisor stops without waiting on a restart in progress. Its watcher once held its lock
// across the whole restart (up to start_timeout while a model loads), so the destructor, which
// takes the lock to say "stop", waited for the restart to end.
#include <signal.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "gateway/server_supervisor.h"
#include "tests/support/temp_dir.h"
#include "tests/weight-server/daemon/server_test_support.h"

namespace hearth::gateway {
namespace {

using test::TempDir;

struct Log {
  std::mutex mutex;
  std::string text;
  void add(const std::string& line) {
    std::lock_guard lock(mutex);
    text += line + "\n";
  }
  std::string get() {
    std::lock_guard lock(mutex);
    return text;
  }
};

// The server binary the supervisor runs: the real hearth-server the first time; every restart
// a stand-in that binds the socket and never answers hello, as a server loading a large model
// does (it writes its pid to `pid_file` once it listens).
std::filesystem::path stalling_server(const TempDir& dir) {
  const auto script = dir / "server.sh";
  const std::string marker = (dir / "started-once").string();
  const std::string pid_file = (dir / "restart.pid").string();
  std::ofstream out(script);
  out << "#!/bin/sh\n"
      << "if [ ! -e '" << marker << "' ]; then : > '" << marker << "'; exec '"
      << test::binary("hearth-server") << "' \"$@\"; fi\n"
      << "exec python3 -c '\n"
      << "import os, socket, sys, time\n"
      << "path = sys.argv[1]\n"
      << "if os.path.exists(path): os.unlink(path)\n"
      << "s = socket.socket(socket.AF_UNIX)\n"
      << "s.bind(path)\n"
      << "s.listen(64)\n"
      << "with open(sys.argv[2] + \".tmp\", \"w\") as f: f.write(str(os.getpid()))\n"
      << "os.rename(sys.argv[2] + \".tmp\", sys.argv[2])\n"
      << "time.sleep(3600)\n"
      << "' \"$2\" '" << pid_file << "'\n";
  out.close();
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  return script;
}

TEST(ServerSupervisor, StopsWithoutWaitingOnARestartInProgress) {
  TempDir dir;
  Log log;
  SupervisorOptions o;
  o.server_binary = stalling_server(dir);
  o.runtime_dir = dir.path();
  o.models = {test::tiny_model_dir().string() + ":tiny"};
  o.backend = "memfd";
  // Far longer than the test waits: a destructor that waits on the restart fails it.
  o.start_timeout = std::chrono::seconds(120);
  o.log = [&log](const std::string& line) { log.add(line); };
  auto supervisor = std::make_unique<ServerSupervisor>(o);

  // No std::regex: GCC 12 warns inside <regex> under the sanitizer build's -O1.
  const std::string started = log.get();
  const std::string ready = "weight server ready (pid ";
  const size_t at = started.find(ready);
  ASSERT_NE(at, std::string::npos) << started;
  ASSERT_EQ(::kill(std::stoi(started.substr(at + ready.size())), SIGKILL), 0);

  // The watcher sees the death and restarts: the stand-in listens and never answers.
  const auto pid_file = dir / "restart.pid";
  for (int tries = 0; tries < 6000 && !std::filesystem::exists(pid_file); ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(std::filesystem::exists(pid_file)) << log.get();
  pid_t restarted = 0;
  std::ifstream(pid_file) >> restarted;
  ASSERT_GT(restarted, 0);

  auto stopped = std::async(std::launch::async, [&] { supervisor.reset(); });
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the supervisor waited on the restart\n"
      << log.get();
  // The restarted server was killed and reaped, not left running (or a zombie: kill(pid, 0)
  // succeeds on one).
  EXPECT_EQ(::kill(restarted, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_EQ(log.get().find("restarting the weight server failed"), std::string::npos) << log.get();
}

}  // namespace
}  // namespace hearth::gateway
