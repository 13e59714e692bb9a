// wait_until_ready: the one spawn-and-poll of the supervisors ends on the child's readiness, its
// exit, or the deadline, each reported as such.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>

#include "ipc/child_ready.h"
#include "tests/ipc/test_util.h"

namespace hearth {
namespace {

using namespace std::chrono_literals;
using Clock = ChildProcess::Clock;
using Outcome = ReadyWait::Outcome;

ChildProcess sh(const std::string& script) {
  return ChildProcess::spawn(ChildProcess::Options({"sh", "-c", script}));
}

TEST(ChildReadyTest, ReadyOnceTheChildSaysSo) {
  test::TempDir dir;
  const std::filesystem::path flag = dir / "ready";
  ChildProcess child = sh("touch '" + flag.string() + "'; exec sleep 60");
  const ReadyWait wait = wait_until_ready(child, Clock::now() + 60s, 10ms,
                                          [&] { return std::filesystem::exists(flag); });
  EXPECT_EQ(wait.outcome, Outcome::kReady);
  EXPECT_TRUE(child.running());
}

TEST(ChildReadyTest, AChildThatExitsFirstFailedToStart) {
  ChildProcess child = sh("exit 7");
  int tries = 0;
  const ReadyWait wait = wait_until_ready(child, Clock::now() + 60s, 10ms, [&] {
    ++tries;
    return false;
  });
  EXPECT_EQ(wait.outcome, Outcome::kExited);
  EXPECT_TRUE(wait.status.exited_with(7)) << wait.status.describe();
  EXPECT_GE(tries, 1);
}

TEST(ChildReadyTest, NotReadyByTheDeadlineLeavesItRunning) {
  ChildProcess child = sh("exec sleep 60");
  int tries = 0;
  const ReadyWait wait = wait_until_ready(child, Clock::now(), 10ms, [&] {
    ++tries;
    return false;
  });
  EXPECT_EQ(wait.outcome, Outcome::kTimedOut);
  EXPECT_EQ(tries, 1);  // asked once, then the deadline (already past) ends it
  EXPECT_TRUE(child.running());
}

TEST(ChildReadyTest, AnErrorFromTheCheckPropagates) {
  ChildProcess child = sh("exec sleep 60");
  EXPECT_THROW(wait_until_ready(child, Clock::now() + 60s, 10ms,
                                []() -> bool { throw std::runtime_error("does not answer"); }),
               std::runtime_error);
  EXPECT_TRUE(child.running());
}

}  // namespace
}  // namespace hearth
