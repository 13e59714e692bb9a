// ChildProcess: exit statuses, signals, deadlines, and that nothing a child started (nor any
// descriptor of ours) outlives or leaks into it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>

#include <thread>

#include "proof/child_process.h"
#include "proof_test_util.h"

namespace hearth::proof {
namespace {

using namespace std::chrono_literals;
using testing::read_file;
using testing::TempDir;

class ChildProcessTest : public ::testing::Test {
 protected:
  ChildProcess sh(const std::string& script) {
    return ChildProcess::spawn({{"sh", "-c", script}, dir_ / "out", dir_ / "err"});
  }
  static ExitStatus wait(ChildProcess& c) {
    return *c.wait_until(std::chrono::steady_clock::now() + 60s);
  }
  static bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }
  // A process that is not our child is reaped by someone else; give it a moment.
  static bool gone_soon(pid_t pid) {
    for (int i = 0; i < 500 && alive(pid); ++i) std::this_thread::sleep_for(10ms);
    return !alive(pid);
  }
  TempDir dir_;
};

TEST_F(ChildProcessTest, ReportsExitCodesAndCapturesOutput) {
  ChildProcess c = sh("cat; echo out; echo err >&2; exit 3");  // cat: stdin is /dev/null
  const ExitStatus s = wait(c);
  EXPECT_FALSE(s.signaled);
  EXPECT_EQ(s.code, 3);
  EXPECT_FALSE(s.success());
  EXPECT_EQ(s.describe(), "exit status 3");
  EXPECT_EQ(read_file(dir_ / "out"), "out\n");
  EXPECT_EQ(read_file(dir_ / "err"), "err\n");
  EXPECT_EQ(c.wait_until(std::chrono::steady_clock::now())->code, 3);  // asked again: same answer
}

TEST_F(ChildProcessTest, ReportsTheSignalThatKilledIt) {
  ChildProcess c = sh("kill -TERM $$");
  const ExitStatus s = wait(c);
  EXPECT_TRUE(s.signaled);
  EXPECT_EQ(s.code, SIGTERM);
  EXPECT_EQ(s.describe(), "killed by signal 15 (SIGTERM)");
}

TEST_F(ChildProcessTest, DeadlinePassesThenKillEndsIt) {
  ChildProcess c = sh("sleep 1000");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(c.wait_until(start + 200ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  c.kill_group();
  const ExitStatus s = wait(c);
  EXPECT_TRUE(s.signaled);
  EXPECT_EQ(s.code, SIGKILL);
}

TEST_F(ChildProcessTest, KillingTheGroupTakesTheWrappersChildrenToo) {
  ChildProcess c = sh("sleep 1000 & echo $! > " + (dir_ / "pid").string() + "; wait");
  for (int i = 0; i < 500 && read_file(dir_ / "pid").empty(); ++i)
    std::this_thread::sleep_for(10ms);
  const pid_t grandchild = pid_t(std::stoi(read_file(dir_ / "pid")));
  ASSERT_TRUE(alive(grandchild));
  c.kill_group();
  wait(c);
  EXPECT_TRUE(gone_soon(grandchild));
}

TEST_F(ChildProcessTest, NoStragglersAfterANormalExit) {
  // The wrapper exits at once, leaving a background child: it must not keep running.
  ChildProcess c = sh("sleep 1000 & echo $! > " + (dir_ / "pid").string() + "; exit 0");
  EXPECT_TRUE(wait(c).success());
  const pid_t grandchild = pid_t(std::stoi(read_file(dir_ / "pid")));
  EXPECT_TRUE(gone_soon(grandchild));
}

TEST_F(ChildProcessTest, DestructorKillsAndReaps) {
  pid_t pid = -1;
  {
    ChildProcess c = sh("sleep 1000");
    pid = c.pid();
    ASSERT_TRUE(alive(pid));
  }
  EXPECT_FALSE(alive(pid));  // reaped by us: not even a zombie
}

TEST_F(ChildProcessTest, OurDescriptorsDoNotLeakIntoIt) {
  const int fd = ::open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  ASSERT_GE(fd, 3);
  ChildProcess c =
      sh("test -e /proc/$$/fd/" + std::to_string(fd) + " && echo leaked || echo closed");
  wait(c);
  ::close(fd);
  EXPECT_EQ(read_file(dir_ / "out"), "closed\n");
}

TEST_F(ChildProcessTest, AMissingProgramIsAClearError) {
  try {
    ChildProcess::spawn({{"/nonexistent/hearth-worker"}, dir_ / "out", dir_ / "err"});
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot start /nonexistent/hearth-worker: No such file"),
              std::string::npos)
        << e.what();
  }
  try {
    ChildProcess::spawn({{"true"}, dir_ / "no-such-dir" / "out", dir_ / "err"});
    ADD_FAILURE() << "an unwritable stdout path was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dir/out: cannot open"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hearth::proof
