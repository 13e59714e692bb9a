// The tensor-parallel exchange (worker/tp/shared_exchange.h) between ranks that each map the
// memfd on their own (threads here; the process tests run it between processes): the sum in
// rank order is bitwise the in-process CPU ranks' ((p0 + p1) + p2) + ..., chunked or not; a rank
// that never comes is named when the deadline passes; a dead peer reported by the check is the
// error; a descriptor that is not an exchange is refused.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "tests/support/error_of.h"
#include "worker/engine/rank_collective.h"
#include "worker/tp/shared_exchange.h"

namespace hearth {
namespace {

using std::chrono::milliseconds;

// A RankCollective over one SharedExchange, for the chunked all-reduce and gather.
class ThreadRank final : public RankCollective {
 public:
  explicit ThreadRank(SharedExchange ex) : ex_(std::move(ex)) {}
  int fd() const { return ex_.fd(); }
  int rank() const override { return ex_.rank(); }
  int world_size() const override { return ex_.world(); }
  void begin_forward(const ForwardBatch&) override {}
  size_t exchange_capacity() const override { return ex_.capacity(); }
  void exchange(std::span<const float> mine,
                const std::function<void(std::span<const std::span<const float>>)>& use) override {
    ex_.exchange(mine, use, milliseconds(20'000), nullptr);
  }

 private:
  SharedExchange ex_;
};

std::vector<std::unique_ptr<ThreadRank>> group(int world, size_t capacity) {
  std::vector<std::unique_ptr<ThreadRank>> ranks;
  ranks.push_back(std::make_unique<ThreadRank>(SharedExchange::create(world, 0, capacity)));
  for (int r = 1; r < world; ++r)
    ranks.push_back(std::make_unique<ThreadRank>(
        SharedExchange::attach(UniqueFd(::dup(ranks[0]->fd())), world, r)));
  return ranks;
}

TEST(SharedExchange, AllReduceIsTheRankOrderSumBitForBit) {
  std::mt19937 rng(0x7e57);  // fresh inputs, a fixed seed
  std::normal_distribution<float> value(0.0f, 3.0f);
  for (int world : {2, 3, 4}) {
    for (size_t capacity : {size_t(7), size_t(1) << 14}) {  // chunked, and in one round
      const size_t count = 5000;
      std::vector<std::vector<float>> partial(world, std::vector<float>(count));
      for (auto& p : partial)
        for (float& x : p) x = value(rng);
      std::vector<float> want = partial[0];  // the in-process ranks' order
      for (int r = 1; r < world; ++r)
        for (size_t i = 0; i < count; ++i) want[i] += partial[r][i];
      auto ranks = group(world, capacity);
      std::vector<std::vector<float>> got = partial;
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
          for (int repeat = 0; repeat < 3; ++repeat) {  // rounds reuse both sets of slots
            got[r] = partial[r];
            ranks[r]->all_reduce(got[r].data(), count);
          }
        });
      for (auto& t : threads) t.join();
      for (int r = 0; r < world; ++r)
        EXPECT_EQ(0, std::memcmp(got[r].data(), want.data(), count * sizeof(float)))
            << "world " << world << " capacity " << capacity << " rank " << r;
    }
  }
}

TEST(SharedExchange, GatherGivesEveryRankItsRowsEvenWhenWidthsDiffer) {
  auto ranks = group(3, 10);  // 10 floats: 2 rows of at most 4 a round
  const int rows = 5;
  const int cols[] = {4, 4, 3};
  std::vector<std::vector<float>> seen(3, std::vector<float>(size_t(rows) * 12, -1.0f));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> mine(size_t(rows) * cols[r]);
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = float(r * 1000 + int(i));
      ranks[r]->all_gather_rows(
          mine.data(), rows, cols[r], 4, [&](int from, int first, int n, const float* data) {
            for (int t = 0; t < n; ++t)
              std::memcpy(&seen[r][size_t(first + t) * 12 + from * 4],
                          data + size_t(t) * cols[from], cols[from] * sizeof(float));
          });
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r)
    for (int from = 0; from < 3; ++from)
      for (int t = 0; t < rows; ++t)
        for (int c = 0; c < cols[from]; ++c)
          EXPECT_EQ(seen[r][size_t(t) * 12 + from * 4 + c],
                    float(from * 1000 + t * cols[from] + c));
}

TEST(SharedExchange, ARankThatNeverComesIsNamedAtTheDeadline) {
  SharedExchange leader = SharedExchange::create(3, 0, 16);
  SharedExchange one = SharedExchange::attach(UniqueFd(::dup(leader.fd())), 3, 1);
  std::thread t([&] {
    const std::vector<float> x(4, 1.0f);
    EXPECT_THROW(one.exchange(
                     x, [](auto) {}, milliseconds(200), nullptr),
                 std::runtime_error);
  });
  const std::vector<float> x(4, 1.0f);
  const std::string why = test::error_of([&] {
    leader.exchange(
        x, [](auto) {}, milliseconds(200), nullptr);
  });
  t.join();
  EXPECT_NE(why.find("tensor-parallel rank 2 did not reach the exchange within 200 ms"),
            std::string::npos)
      << why;
}

TEST(SharedExchange, ADeadPeerReportedByTheCheckIsTheError) {
  SharedExchange leader = SharedExchange::create(2, 0, 16);
  const std::vector<float> x(4, 1.0f);
  const std::string why = test::error_of([&] {
    leader.exchange(
        x, [](auto) {}, milliseconds(60'000),
        [] { return std::string("tensor-parallel rank 1 (pid 7) exited"); });
  });
  EXPECT_EQ(why, "tensor-parallel rank 1 (pid 7) exited");
}

TEST(SharedExchange, RefusesADescriptorThatIsNotAnExchange) {
  UniqueFd fd(::memfd_create("not-an-exchange", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(fd.get(), 1 << 16), 0);
  EXPECT_NE(test::error_of([&] {
              SharedExchange::attach(std::move(fd), 2, 1);
            }).find("not one for 2 ranks"),
            std::string::npos);
  SharedExchange leader = SharedExchange::create(2, 0, 16);
  EXPECT_NE(test::error_of([&] {
              SharedExchange::attach(UniqueFd(::dup(leader.fd())), 3, 1);
            }).find("not one for 3 ranks"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { SharedExchange::create(1, 0, 16); }).find("group of 2 to 64"),
            std::string::npos);
}

}  // namespace
}  // namespace hearth
