// The frame fuzzer's mutations (tests/ipc/frame_fuzz.h) sent to a live broker over real
// sockets: every connection gets well-formed replies and is closed cleanly, and afterwards
// the broker holds no descriptor, lease or client it should not and still serves a bystander.
#include <gtest/gtest.h>

#include "broker_test_support.h"
#include "tests/ipc/frame_fuzz.h"

namespace hearth::test {
namespace {

using fuzz::Rng;

TEST(BrokerFuzz, MutatedFramesFromManyClients) {
  broker::BrokerOptions options;
  options.admin_uid = ::geteuid() + 1;  // load/unload/shutdown in the corpus are refused
  options.idle_timeout = 2s;
  InProcessBroker server(options);
  ipc::Client bystander = server.client("bystander");
  const std::vector<std::string> corpus =
      fuzz::load_corpus(std::filesystem::path(HEARTH_SOURCE_DIR) / "tests/fuzz/corpus/ipc_frame");
  ASSERT_FALSE(corpus.empty());
  const int baseline_fds = count_open_fds();

  constexpr int kCases = 600;
  int answered = 0, refused = 0;
  for (std::uint64_t c = 0; c < kCases; ++c) {
    Rng rng{c + 3'000'000};
    std::string data = corpus[rng.below(corpus.size())];
    const std::string& other = corpus[rng.below(corpus.size())];
    for (std::size_t m = rng.below(4); m > 0; --m) fuzz::mutate(data, other, rng);
    UniqueFd socket = raw_connect(server.path());
    if (rng.below(2)) raw_hello(socket.get());
    write_all(socket.get(), data);
    ::shutdown(socket.get(), SHUT_WR);  // the broker sees the end: no case waits on a timeout
    ipc::ReceiveOptions patience;
    patience.timeout = kPatience;
    for (;;) {
      std::optional<ipc::Frame> frame;
      try {
        frame = ipc::receive_frame(socket.get(), patience);
      } catch (const ipc::TimeoutError&) {
        FAIL() << "case " << c << ": the broker neither answered nor closed";
      } catch (const ipc::IpcError&) {
        break;  // reset by the broker after its last reply
      }
      if (!frame) break;
      const ipc::ReplyStatus status = ipc::parse_reply_status(frame->body);
      (status.ok ? answered : refused)++;
      if (!status.ok) {
        EXPECT_TRUE(is_valid_utf8(status.message)) << "case " << c;
      }
    }
  }
  RecordProperty("replies_ok", answered);
  RecordProperty("replies_error", refused);
  EXPECT_GT(answered, 0);
  EXPECT_GT(refused, 0);
  EXPECT_EQ(bystander.call(ipc::op::kList).body["models"], nlohmann::json({"test"}));
  EXPECT_TRUE(eventually([&] { return server.handler().disconnects().size() == kCases; }))
      << server.handler().disconnects().size() << " of " << kCases << " clients gone";
  EXPECT_TRUE(eventually([&] { return count_open_fds() == baseline_fds; }))
      << count_open_fds() << " descriptors open, " << baseline_fds << " before";
  EXPECT_EQ(server.handler().leases(), 0);
}

}  // namespace
}  // namespace hearth::test
