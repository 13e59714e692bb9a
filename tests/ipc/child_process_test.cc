// ChildProcess: exit statuses, signals, deadlines, and that nothing a child started (nor any
// descriptor of ours) outlives or leaks into it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "ipc/child_process.h"
#include "tests/ipc/test_util.h"

namespace hearth {
namespace {

using namespace std::chrono_literals;
using Stream = ChildProcess::Stream;
using test::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::chrono::steady_clock::time_point in(std::chrono::milliseconds ms) {
  return std::chrono::steady_clock::now() + ms;
}

class ChildProcessTest : public ::testing::Test {
 protected:
  // `script` under sh, stdout and stderr to files.
  ChildProcess sh(const std::string& script) {
    return ChildProcess::spawn(ChildProcess::Options({"sh", "-c", script})
                                   .stdout_to(Stream::file(dir_ / "out"))
                                   .stderr_to(Stream::file(dir_ / "err")));
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
    ChildProcess::spawn(ChildProcess::Options({"/nonexistent/hearth-worker"}));
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot start /nonexistent/hearth-worker: No such file"),
              std::string::npos)
        << e.what();
  }
  try {
    ChildProcess::spawn(
        ChildProcess::Options({"true"}).stdout_to(Stream::file(dir_ / "no-such-dir/out")));
    ADD_FAILURE() << "an unwritable stdout path was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dir/out: cannot open"), std::string::npos)
        << e.what();
  }
}

TEST_F(ChildProcessTest, PipesCarryStdinToStdoutLineByLine) {
  ChildProcess c = ChildProcess::spawn(
      ChildProcess::Options({"sh", "-c", "while read l; do echo \"<$l>\"; done"})
          .stdin_from(Stream::pipe())
          .stdout_to(Stream::pipe()));
  c.write_stdin("one\ntwo\n");
  EXPECT_EQ(c.stdout_pipe().read_line(in(60s)), "<one>");
  EXPECT_EQ(c.stdout_pipe().read_line(in(60s)), "<two>");
  c.close_stdin();
  EXPECT_EQ(c.stdout_pipe().read_line(in(60s)), std::nullopt);  // EOF after stdin closed
  EXPECT_TRUE(c.stdout_pipe().at_end());
  EXPECT_TRUE(c.wait().success());
}

TEST_F(ChildProcessTest, ReadingAPipeStopsAtTheDeadline) {
  // The marker says "partial" is in the pipe, so what the kill leaves to read does not depend on
  // how fast a loaded machine starts sh.
  const std::string written = dir_ / "written";
  ChildProcess c = ChildProcess::spawn(
      ChildProcess::Options({"sh", "-c", "printf partial; : > \"$1\"; sleep 1000", "sh", written})
          .stdout_to(Stream::pipe()));
  for (int i = 0; i < 6000 && !std::filesystem::exists(written); ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(std::filesystem::exists(written));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(c.stdout_pipe().read_line(start + 200ms), std::nullopt);  // no newline yet
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_TRUE(c.running());
  c.kill_group();
  EXPECT_EQ(c.stdout_pipe().read_to_end(in(60s)), "partial");  // what came, once it ends
  // The pipe's end can come a moment before the exit status does (the kernel closes a dying
  // process's files before it is reapable): wait for the status rather than poll it once.
  const ExitStatus ended = c.wait();
  EXPECT_TRUE(ended.signaled);
  EXPECT_EQ(ended.code, SIGKILL);
}

TEST_F(ChildProcessTest, StderrPipeAndExtraEnvironment) {
  ::setenv("HEARTH_CHILD_TEST_KEPT", "parent", 1);
  ::setenv("HEARTH_CHILD_TEST_REPLACED", "parent", 1);
  ChildProcess c = ChildProcess::spawn(
      ChildProcess::Options({"sh", "-c",
                             "echo \"$HEARTH_CHILD_TEST_KEPT $HEARTH_CHILD_TEST_REPLACED "
                             "$HEARTH_CHILD_TEST_NEW\" >&2"})
          .stderr_to(Stream::pipe())
          .with_env({"HEARTH_CHILD_TEST_REPLACED=child", "HEARTH_CHILD_TEST_NEW=x=y"}));
  EXPECT_EQ(c.stderr_pipe().read_to_end(in(60s)), "parent child x=y\n");
  EXPECT_TRUE(c.wait().success());
  EXPECT_THROW(c.stdout_pipe(), std::logic_error);  // stdout went to /dev/null
  EXPECT_THROW(ChildProcess::spawn(ChildProcess::Options({"true"}).with_env({"NOEQUALS"})),
               std::runtime_error);
}

TEST_F(ChildProcessTest, StdinFromAFile) {
  std::ofstream(dir_ / "input") << "from a file\n";
  ChildProcess c = ChildProcess::spawn(ChildProcess::Options({"cat"})
                                           .stdin_from(Stream::file(dir_ / "input"))
                                           .stdout_to(Stream::file(dir_ / "out")));
  EXPECT_TRUE(c.wait().success());
  EXPECT_EQ(read_file(dir_ / "out"), "from a file\n");
}

// A socketpair end as stdin: one channel both ways (a tensor-parallel follower's, worker/tp/).
TEST_F(ChildProcessTest, ADescriptorAsStdinIsAChannelBothWays) {
  int ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends), 0);
  UniqueFd ours(ends[0]), theirs(ends[1]);
  ChildProcess child = ChildProcess::spawn(
      ChildProcess::Options({"/bin/sh", "-c", "read line; echo \"got $line\" >&0"})
          .stdin_from(ChildProcess::Stream::descriptor(theirs.get())));
  theirs.reset();  // the child holds its own copy
  ASSERT_EQ(::write(ours.get(), "ping\n", 5), 5);
  PipeReader reader(std::move(ours));
  EXPECT_EQ(reader.read_line(), "got ping");
  EXPECT_TRUE(child.wait().success());
}

TEST_F(ChildProcessTest, WritingToAChildThatStoppedReadingIsAnErrorNotSigpipe) {
  ChildProcess c = ChildProcess::spawn(ChildProcess::Options({"true"}).stdin_from(Stream::pipe()));
  EXPECT_TRUE(c.wait().success());
  // A pipe holds 64 KiB; 1 MiB cannot go anywhere once the reader is gone.
  EXPECT_THROW(c.write_stdin(std::string(1 << 20, 'x')), std::runtime_error);
}

TEST_F(ChildProcessTest, SignalReachesTheProcess) {
  ChildProcess c = ChildProcess::spawn(ChildProcess::Options({"sleep", "1000"}));
  c.signal(SIGTERM);
  const ExitStatus s = c.wait();
  EXPECT_TRUE(s.signaled);
  EXPECT_EQ(s.code, SIGTERM);
  EXPECT_FALSE(s.exited_with(0));
}

// The parent process dies without running a destructor (as by SIGKILL or a crash): its child
// must die too (PR_SET_PDEATHSIG), not be re-parented to init and run on.
TEST_F(ChildProcessTest, AChildDiesWithItsParentProcess) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const pid_t parent = ::fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    pid_t child = -1;
    try {
      // Leaked on purpose: the process ends without destructors.
      child =
          (new ChildProcess(ChildProcess::spawn(ChildProcess::Options({"sleep", "1000"}))))->pid();
    } catch (...) {
    }
    [[maybe_unused]] const ssize_t n = ::write(write_end.get(), &child, sizeof child);
    ::_exit(0);
  }
  write_end.reset();
  pid_t child = -1;
  ASSERT_EQ(::read(read_end.get(), &child, sizeof child), ssize_t(sizeof child));
  ASSERT_GT(child, 0);
  const UniqueFd child_fd(int(::syscall(SYS_pidfd_open, child, 0)));
  ASSERT_TRUE(child_fd) << std::strerror(errno);
  int status = 0;
  ASSERT_EQ(::waitpid(parent, &status, 0), parent);
  pollfd p{child_fd.get(), POLLIN, 0};
  const bool exited = ::poll(&p, 1, 30'000) == 1;
  if (!exited) ::kill(child, SIGKILL);  // do not leave it behind for the next test
  EXPECT_TRUE(exited) << "the child outlived its parent process";
}

// The parent-death signal follows the thread that forked; a child started from a thread that
// has since exited must still run (spawns happen on the process's own spawn thread).
TEST_F(ChildProcessTest, AChildOutlivesTheThreadThatStartedIt) {
  std::optional<ChildProcess> child;
  pid_t tid = 0;
  std::thread([&] {
    tid = ::gettid();
    child.emplace(ChildProcess::spawn(
        ChildProcess::Options({"cat"}).stdin_from(Stream::pipe()).stdout_to(Stream::pipe())));
  }).join();
  ASSERT_TRUE(child);
  // The thread is released (and any parent-death signal sent) once its task entry is gone.
  const std::string task = "/proc/self/task/" + std::to_string(tid);
  const auto deadline = in(30s);
  while (::access(task.c_str(), F_OK) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  child->write_stdin("still here\n");
  EXPECT_EQ(child->stdout_pipe().read_line(in(30s)), "still here");
}

}  // namespace
}  // namespace hearth
