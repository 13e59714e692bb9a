// RankedKvMemory (issue 26) on real leases: two ranks' pools leased from the two devices of a
// tensor-parallel hearth-server (memfd), one connection as a worker has. A grow keeps only what
// every rank got and gives the rest back to its device; shrinks reach every rank.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/weight-server/daemon/server_test_support.h"
#include "worker/engine/ranked_kv_memory.h"
#include "worker/leased_kv_memory.h"

namespace hearth {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr uint64_t kChunk = 2 * kMiB;
constexpr int64_t kBlock = 256 * 1024;  // 8 blocks a 2 MiB chunk

std::shared_ptr<ipc::Client> connect(const std::string& socket) {
  return std::make_shared<ipc::Client>(test::connect_client(socket, "ranked"));
}

uint64_t kv_on(test::ServerProcess& server, size_t device) {
  return server.stats()["kv_devices"][device]["kv_bytes"].get<uint64_t>();
}

// A rank's pool holds its heads' share of each block (the heads divide evenly), as many blocks as
// the whole pool may, and at least one context (rounded up to whole blocks).
TEST(RankedKvMemory, ARankLeasesItsHeadsShareOfABlockAndOneContext) {
  const RankLease lease = rank_lease(/*kv_bytes_per_token=*/4096, /*ranks=*/2, /*block_size=*/16,
                                     /*max_blocks=*/64, /*context=*/100);
  EXPECT_EQ(lease.block_bytes, 2048 * 16);
  EXPECT_EQ(lease.max_blocks, 64);
  EXPECT_EQ(lease.min_blocks, 7);
  EXPECT_EQ(rank_lease(4096, 1, 16, 64, 96).min_blocks, 6);
  EXPECT_EQ(rank_lease(4096, 4, 32, 8, 1).block_bytes, 1024 * 32);
}

TEST(RankedKvMemory, RanksGrowTogetherAndGiveBackWhatTheOthersDidNotGet) {
  test::ServerProcess server({"--backend", "memfd", "--model",
                              test::tiny_model_dir().string() + ":tiny", "--tensor-parallel", "2",
                              "--memory-mb", "100", "--gpu-memory-fraction", "0.5"});
  // Device 1 keeps one chunk free; device 0 has plenty.
  ipc::Client hog = test::connect_client(server.socket(), "hog");
  const uint64_t free1 = server.stats()["kv_devices"][1]["free_bytes"].get<uint64_t>() / kChunk;
  ASSERT_GT(free1, 3u);
  const ipc::Frame held =
      hog.call(ipc::op::kKvLease, ipc::make_kv_lease_args({kChunk, free1 - 1, 0, 1}));
  std::vector<uint64_t> hog_chunks = held.body["chunks"].get<std::vector<uint64_t>>();
  ASSERT_EQ(hog_chunks.size(), free1 - 1);
  const uint64_t hog_bytes = hog_chunks.size() * kChunk;

  std::shared_ptr<ipc::Client> client = connect(server.socket());
  const KvMemoryFactory lease = [&](int64_t block_bytes, int most, int fewest, int rank) {
    return std::make_shared<LeasedKvMemory>(client, block_bytes, most, fewest, nullptr,
                                            LeasedKvSharing{}, rank);
  };
  std::shared_ptr<KvMemory> memory = make_ranked_kv_memory(lease, 2, RankLease{kBlock, 64, 8});
  ASSERT_EQ(memory->ranks(), 2);
  EXPECT_EQ(memory->blocks(), 8);  // one chunk (the minimum) on each device
  EXPECT_EQ(memory->chunks(), 2);
  EXPECT_EQ(memory->bytes(), 2 * kChunk);
  EXPECT_NE(memory->rank(0).base(), memory->rank(1).base());
  EXPECT_EQ(kv_on(server, 0), kChunk);
  EXPECT_EQ(kv_on(server, 1), hog_bytes + kChunk);

  // Device 1 is full: device 0's three new chunks go back, nothing grew.
  EXPECT_EQ(memory->grow(24), 0);
  EXPECT_EQ(memory->blocks(), 8);
  EXPECT_EQ(memory->rank(0).blocks(), 8);
  EXPECT_EQ(kv_on(server, 0), kChunk);
  // Asked again, the full device goes first and nothing is leased anywhere.
  const uint64_t leased = server.stats()["kv_chunks_total"].get<uint64_t>();
  EXPECT_EQ(memory->grow(24), 0);
  EXPECT_EQ(server.stats()["kv_chunks_total"].get<uint64_t>(), leased);

  // Two chunks free on device 1: both ranks keep two more, device 0's third goes back.
  hog.call(ipc::op::kKvReturn,
           ipc::make_kv_return_args(std::vector<uint64_t>(hog_chunks.end() - 2, hog_chunks.end())));
  EXPECT_EQ(memory->grow(24), 16);
  EXPECT_EQ(memory->blocks(), 24);
  EXPECT_EQ(memory->rank(0).blocks(), 24);
  EXPECT_EQ(memory->rank(1).blocks(), 24);
  EXPECT_EQ(kv_on(server, 0), 3 * kChunk);
  EXPECT_EQ(kv_on(server, 1), hog_bytes - 2 * kChunk + 3 * kChunk);

  EXPECT_EQ(memory->shrink(8), 8);
  EXPECT_EQ(kv_on(server, 0), kChunk);
  EXPECT_EQ(kv_on(server, 1), hog_bytes - 2 * kChunk + kChunk);
  memory.reset();  // returns both ranks' chunks
  EXPECT_EQ(kv_on(server, 0), 0u);
}

TEST(RankedKvMemory, RanksOfAnotherBlockSizeAreRefused) {
  test::ServerProcess server({"--backend", "memfd", "--model",
                              test::tiny_model_dir().string() + ":tiny", "--tensor-parallel", "2",
                              "--memory-mb", "100", "--gpu-memory-fraction", "0.5"});
  std::shared_ptr<ipc::Client> client = connect(server.socket());
  std::vector<std::shared_ptr<KvMemory>> ranks = {
      std::make_shared<LeasedKvMemory>(client, kBlock, 8, 0, nullptr, LeasedKvSharing{}, 0),
      std::make_shared<LeasedKvMemory>(client, 2 * kBlock, 8, 0, nullptr, LeasedKvSharing{}, 1)};
  EXPECT_THROW(RankedKvMemory{ranks}, std::invalid_argument);
  EXPECT_THROW(RankedKvMemory{{}}, std::invalid_argument);
}

}  // namespace
}  // namespace hearth
