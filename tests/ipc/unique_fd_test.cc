#include "base/unique_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace hearth {
namespace {

bool is_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

TEST(UniqueFd, ClosesOnDestruction) {
  int raw;
  {
    UniqueFd fd = test::make_memfd("x");
    raw = fd.get();
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(UniqueFd, ReleaseGivesUpOwnership) {
  UniqueFd fd = test::make_memfd("x");
  const int raw = fd.release();
  EXPECT_FALSE(fd.valid());
  EXPECT_EQ(fd.get(), -1);
  EXPECT_TRUE(is_open(raw));
  ::close(raw);
}

TEST(UniqueFd, ResetClosesThePreviousDescriptor) {
  UniqueFd fd = test::make_memfd("a");
  const int first = fd.get();
  UniqueFd other = test::make_memfd("b");
  const int second = other.release();
  fd.reset(second);
  EXPECT_FALSE(is_open(first));
  EXPECT_EQ(fd.get(), second);
  fd.reset();
  EXPECT_FALSE(is_open(second));
  EXPECT_FALSE(fd);
}

TEST(UniqueFd, MoveTransfersOwnership) {
  UniqueFd a = test::make_memfd("x");
  const int raw = a.get();
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(b.get(), raw);
  UniqueFd c;
  c = std::move(b);
  EXPECT_EQ(c.get(), raw);
  EXPECT_TRUE(is_open(raw));
  UniqueFd& alias = c;
  c = std::move(alias);  // self-move keeps the descriptor
  EXPECT_TRUE(is_open(raw));
}

}  // namespace
}  // namespace hearth
