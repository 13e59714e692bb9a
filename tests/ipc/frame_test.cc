#include "ipc/frame.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <thread>
#include <vector>

#include "ipc/errors.h"
#include "tests/support/send_with_fds.h"
#include "test_util.h"

namespace hearth::ipc {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::vector<int> raw(const std::vector<UniqueFd>& fds) {
  std::vector<int> out;
  for (const UniqueFd& fd : fds) out.push_back(fd.get());
  return out;
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// sendmsg with any number of FDs, bypassing send_frame's limit.
void raw_send_with_fds(int socket, const std::string& bytes, const std::vector<int>& fds) {
  ASSERT_EQ(test::send_with_fds(socket, bytes, fds), static_cast<ssize_t>(bytes.size()))
      << std::strerror(errno);
}

TEST(Frame, RoundTripsJsonAndFdsThatReferToTheSameFiles) {
  auto [a, b] = test::socket_pair();
  std::vector<UniqueFd> files;
  for (int i = 0; i < 3; ++i) files.push_back(test::make_memfd("file " + std::to_string(i)));
  const json body = {{"op", "import"}, {"id", 7}, {"names", {"x", "y", "z"}}};
  send_frame(a.get(), body, raw(files));

  auto frame = receive_frame(b.get());
  ASSERT_TRUE(frame);
  EXPECT_EQ(frame->body, body);
  ASSERT_EQ(frame->fds.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(test::identity(frame->fds[i].get()), test::identity(files[i].get()));
    EXPECT_NE(frame->fds[i].get(), files[i].get());
    EXPECT_EQ(test::read_all(frame->fds[i].get()), "file " + std::to_string(i));
    EXPECT_TRUE(::fcntl(frame->fds[i].get(), F_GETFD) & FD_CLOEXEC);
  }
}

TEST(Frame, CarriesABatchOf250Fds) {
  auto [a, b] = test::socket_pair();
  std::vector<UniqueFd> files;
  for (std::size_t i = 0; i < kMaxFdsPerFrame; ++i) {
    files.push_back(test::make_memfd(std::to_string(i)));
  }
  send_frame(a.get(), {{"batch", 1}}, raw(files));
  auto frame = receive_frame(b.get());
  ASSERT_TRUE(frame);
  ASSERT_EQ(frame->fds.size(), kMaxFdsPerFrame);
  for (std::size_t i = 0; i < kMaxFdsPerFrame; ++i) {
    ASSERT_EQ(test::identity(frame->fds[i].get()), test::identity(files[i].get())) << i;
  }
}

TEST(Frame, SendRefusesMoreThan250FdsAndSendsNothing) {
  auto [a, b] = test::socket_pair();
  std::vector<UniqueFd> files;
  for (std::size_t i = 0; i < kMaxFdsPerFrame + 1; ++i) files.push_back(test::make_memfd("x"));
  EXPECT_THROW(send_frame(a.get(), {{"batch", 1}}, raw(files)), IpcError);
  EXPECT_FALSE(readable(b.get()));
}

TEST(Frame, ReceiveRefuses251FdsAndClosesThoseThatArrived) {
  auto [a, b] = test::socket_pair();
  const int baseline = test::count_open_fds();
  {
    std::vector<UniqueFd> files;
    for (int i = 0; i < 251; ++i) files.push_back(test::make_memfd("x"));
    raw_send_with_fds(a.get(), encode_frame({{"batch", 1}}), raw(files));
  }
  EXPECT_EQ(test::count_open_fds(), baseline);  // the only references are in flight
  try {
    receive_frame(b.get());
    FAIL() << "expected a truncated-control-data error";
  } catch (const IpcError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::count_open_fds(), baseline);
}

TEST(Frame, RefusesFdsOnAFrameThatMustNotCarryThemAndClosesThem) {
  auto [a, b] = test::socket_pair();
  const int baseline = test::count_open_fds();
  {
    std::vector<UniqueFd> files;
    for (int i = 0; i < 3; ++i) files.push_back(test::make_memfd("x"));
    send_frame(a.get(), {{"op", "stats"}, {"id", 1}}, raw(files));
  }
  ReceiveOptions options;
  options.max_fds = 0;
  try {
    receive_frame(b.get(), options);
    FAIL() << "expected bad_request";
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadRequest);
  }
  EXPECT_EQ(test::count_open_fds(), baseline);
}

TEST(Frame, RefusesAnOversizedFrame) {
  auto [a, b] = test::socket_pair();
  send_frame(a.get(), {{"pad", std::string(1000, 'x')}});
  ReceiveOptions options;
  options.max_frame_bytes = 100;
  try {
    receive_frame(b.get(), options);
    FAIL() << "expected too_large";
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTooLarge);
  }
}

TEST(Frame, ReassemblesAFrameThatArrivesInPieces) {
  auto [a, b] = test::socket_pair();
  const std::string bytes = encode_frame({{"pieces", std::string(5000, 'p')}});
  std::thread writer([&, fd = a.get()] {
    for (std::size_t pos = 0; pos < bytes.size(); pos += 777) {
      const std::size_t n = std::min<std::size_t>(777, bytes.size() - pos);
      ASSERT_EQ(::write(fd, bytes.data() + pos, n), static_cast<ssize_t>(n));
      std::this_thread::sleep_for(1ms);
    }
  });
  auto frame = receive_frame(b.get());
  writer.join();
  ASSERT_TRUE(frame);
  EXPECT_EQ(frame->body["pieces"].get<std::string>().size(), 5000u);
}

TEST(Frame, SendsALargeFrameThroughPartialWritesOnNonBlockingSockets) {
  auto [a, b] = test::socket_pair();
  ::fcntl(a.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(b.get(), F_SETFL, O_NONBLOCK);
  const std::string big(8 << 20, 'b');  // far more than a socket buffer holds
  auto file = test::make_memfd("attached");
  std::thread writer([&] { send_frame(a.get(), {{"big", big}}, std::vector<int>{file.get()}); });
  auto frame = receive_frame(b.get());
  writer.join();
  ASSERT_TRUE(frame);
  EXPECT_EQ(frame->body["big"].get<std::string>(), big);
  ASSERT_EQ(frame->fds.size(), 1u);
  EXPECT_EQ(test::identity(frame->fds[0].get()), test::identity(file.get()));
}

TEST(Frame, ReceivesBackToBackFramesWithTheirOwnFds) {
  auto [a, b] = test::socket_pair();
  auto one = test::make_memfd("one");
  auto two = test::make_memfd("two");
  send_frame(a.get(), {{"n", 1}}, std::vector<int>{one.get()});
  send_frame(a.get(), {{"n", 2}});
  send_frame(a.get(), {{"n", 3}}, std::vector<int>{two.get(), one.get()});
  auto f1 = receive_frame(b.get());
  auto f2 = receive_frame(b.get());
  auto f3 = receive_frame(b.get());
  ASSERT_TRUE(f1 && f2 && f3);
  ASSERT_EQ(f1->fds.size(), 1u);
  EXPECT_EQ(test::read_all(f1->fds[0].get()), "one");
  EXPECT_TRUE(f2->fds.empty());
  ASSERT_EQ(f3->fds.size(), 2u);
  EXPECT_EQ(test::read_all(f3->fds[0].get()), "two");
}

TEST(Frame, CleanCloseBetweenFramesIsNotAnError) {
  auto [a, b] = test::socket_pair();
  a.reset();
  EXPECT_FALSE(receive_frame(b.get()));
}

TEST(Frame, CloseInTheMiddleOfAFrameIsAnErrorAndClosesItsFds) {
  auto [a, b] = test::socket_pair();
  const int baseline = test::count_open_fds();
  {
    auto file = test::make_memfd("x");
    const std::string bytes = encode_frame({{"cut", "short"}});
    raw_send_with_fds(a.get(), bytes.substr(0, 6), {file.get()});
  }
  a.reset();
  EXPECT_THROW(receive_frame(b.get()), ConnectionClosed);
  EXPECT_EQ(test::count_open_fds(), baseline - 1);  // a is closed too
}

TEST(Frame, TimesOutOnASilentPeerAndClosesFdsOfAPartialFrame) {
  auto [a, b] = test::socket_pair();
  ReceiveOptions options;
  options.timeout = 50ms;
  EXPECT_THROW(receive_frame(b.get(), options), TimeoutError);

  const int baseline = test::count_open_fds();
  {
    auto file = test::make_memfd("x");
    raw_send_with_fds(a.get(), encode_frame({{"never", "finished"}}).substr(0, 5), {file.get()});
  }
  EXPECT_THROW(receive_frame(b.get(), options), TimeoutError);
  EXPECT_EQ(test::count_open_fds(), baseline);
}

TEST(Frame, SendToAClosedPeerThrowsConnectionClosed) {
  auto [a, b] = test::socket_pair();
  b.reset();
  EXPECT_THROW(send_frame(a.get(), {{"x", 1}}), ConnectionClosed);
}

}  // namespace
}  // namespace hearth::ipc
