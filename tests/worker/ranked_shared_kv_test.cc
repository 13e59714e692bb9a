// Prefix KV shared between tensor-parallel workers (issue 26): each rank's pool shares its pieces
// of a block in a domain of its own, and a TP worker takes a block only where every rank found it
// at rank 0's id, since one block table addresses every rank's pool. Against the real server
// in-process, memfd chunks; the ranks' pools all lease from device 0 here (where chunks come from
// does not change how they are shared).
#include "worker/engine/ranked_kv_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/weight-server/daemon/in_process_server.h"
#include "weight-server/model/host_store.h"
#include "worker/engine/cache_domain.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/engine.h"
#include "worker/leased_kv_memory.h"

namespace hearth {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr int64_t kBlock = 256 * 1024;  // 8 blocks a 2 MiB chunk
constexpr int kBlocksPerChunk = 8;
const BlockKey kDomain{3, 4}, kRoot{5, 6};

// A TP worker's KV memory: `ranks` leased pools on one connection (as a served worker has),
// each of `blocks` blocks with room for `share_chunks` foreign chunks, in `domain`.
std::shared_ptr<RankedKvMemory> ranked_memory(const std::string& socket, int ranks, int blocks,
                                              int share_chunks, const BlockKey& domain = kDomain) {
  auto server = std::make_shared<ipc::Client>(test::client_of(socket, "ranked-kv-test"));
  std::vector<std::shared_ptr<KvMemory>> pools;
  for (int r = 0; r < ranks; ++r)
    pools.push_back(std::make_shared<LeasedKvMemory>(server, kBlock, blocks, blocks, nullptr,
                                                     LeasedKvSharing{{}, share_chunks}));
  auto memory = std::make_shared<RankedKvMemory>(std::move(pools));
  if (SharedKv* shared = memory->shared()) shared->set_domain(domain);
  return memory;
}

class RankedSharedKvTest : public ::testing::Test {
 protected:
  // Random bytes in block `block` of rank `rank`'s pool; returns them.
  std::vector<std::byte> fill(KvMemory& memory, int rank, int block) {
    std::vector<std::byte> bytes(static_cast<size_t>(kBlock));
    for (std::byte& x : bytes) x = std::byte(rng_());
    std::memcpy(memory.rank(rank).base() + int64_t(block) * kBlock, bytes.data(), bytes.size());
    return bytes;
  }
  // One block's link of a chain rooted at kRoot: a random key and tokens.
  struct Link {
    BlockKey key;
    std::vector<int32_t> tokens;
  };
  Link link() {
    Link l{{rng_(), rng_()}, std::vector<int32_t>(16)};
    for (int32_t& t : l.tokens) t = int32_t(rng_() % 1000);
    return l;
  }
  static std::vector<SharedKvLink> chain(const Link& l) { return {{l.key, l.tokens}}; }
  static std::vector<SharedKvBlock> block(int id, const Link& l) {
    return {{id, l.key, kRoot, l.tokens}};
  }
  // The same in rank `rank`'s keys, for one rank's pool alone (as RankedKvMemory asks it).
  static std::vector<SharedKvLink> rank_chain(const Link& l, int rank) {
    return {{rank_key(l.key, rank), l.tokens}};
  }
  static std::vector<SharedKvBlock> rank_block(int id, const Link& l, int rank) {
    return {{id, rank_key(l.key, rank), rank_key(kRoot, rank), l.tokens}};
  }
  // Whether rank `rank` of `memory` holds `bytes` at block `id`.
  static bool holds(KvMemory& memory, int rank, int32_t id, const std::vector<std::byte>& bytes) {
    return std::memcmp(memory.rank(rank).base() + int64_t(id) * kBlock, bytes.data(),
                       bytes.size()) == 0;
  }

  test::TempDir model_dir_;
  std::mt19937_64 rng_{std::random_device{}()};
  void SetUp() override { write_synthetic_model(model_dir_.path(), SynthOptions{}); }
};

TEST_F(RankedSharedKvTest, EveryRankReadsItsOwnPieceOfABlockAtRankZerosId) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto a = ranked_memory(server.socket(), 2, 16, 2);
  auto b = ranked_memory(server.socket(), 2, 16, 2);
  ASSERT_NE(b->shared(), nullptr);
  EXPECT_EQ(b->first_foreign_block(), 16);
  EXPECT_EQ(b->foreign_capacity(), 2 * kBlocksPerChunk);

  // A's ranks hold different pieces of block 12 (their own heads).
  const std::vector<std::byte> piece0 = fill(*a, 0, 12), piece1 = fill(*a, 1, 12);
  const Link l = link();
  EXPECT_EQ(a->publish(block(12, l)), 1u);

  const std::vector<int32_t> found = b->find(kRoot, chain(l));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_GE(found[0], b->first_foreign_block());
  EXPECT_TRUE(holds(*b, 0, found[0], piece0));
  EXPECT_TRUE(holds(*b, 1, found[0], piece1));

  // A pool of every head (tensor_parallel 1, same engine domain) finds none of the pieces.
  LeasedKvMemory whole(std::make_shared<ipc::Client>(test::client_of(server.socket())), kBlock, 16,
                       16, nullptr, {kDomain, 2});
  EXPECT_TRUE(whole.find(kRoot, chain(l)).empty());

  // A writes block 12 again only once B gave it back on every rank.
  const std::vector<int32_t> own{12};
  EXPECT_TRUE(a->withdraw(own).empty());
  b->release(found);
  EXPECT_EQ(a->withdraw(own), own);
}

// A rank maps a chunk it has not mapped yet where rank 0 put the block, not at its own next free
// slot: here B's rank 0 already holds another worker's chunk in its first slot, its rank 1 none.
TEST_F(RankedSharedKvTest, ARankMapsANewChunkWhereRankZeroHasTheBlock) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto a = ranked_memory(server.socket(), 2, 16, 2);
  auto b = ranked_memory(server.socket(), 2, 16, 2);
  auto p = ranked_memory(server.socket(), 2, 16, 2);

  const Link first = link();
  fill(*p, 0, 3);
  ASSERT_EQ(p->rank(0).shared()->publish(rank_block(3, first, 0)), 1u);  // rank 0's piece only
  const std::vector<int32_t> on_rank0 =
      b->rank(0).shared()->find(rank_key(kRoot, 0), rank_chain(first, 0));
  ASSERT_EQ(on_rank0.size(), 1u);
  EXPECT_LT(on_rank0[0], b->first_foreign_block() + kBlocksPerChunk);  // slot 0

  const std::vector<std::byte> piece0 = fill(*a, 0, 5), piece1 = fill(*a, 1, 5);
  const Link second = link();
  ASSERT_EQ(a->publish(block(5, second)), 1u);
  const std::vector<int32_t> found = b->find(kRoot, chain(second));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], b->first_foreign_block() + kBlocksPerChunk + 5);  // slot 1, offset 5
  EXPECT_TRUE(holds(*b, 0, found[0], piece0));
  EXPECT_TRUE(holds(*b, 1, found[0], piece1));
  b->release(found);
  b->rank(0).shared()->release(on_rank0);
}

// Two workers that computed one prefix at once may each have won it on one rank: to a third,
// the ranks disagree on where the block is, so it is a miss, and every reference taken on the
// way goes back.
TEST_F(RankedSharedKvTest, ABlockWonByTwoWorkersOnDifferentRanksIsAMissThatHoldsNothing) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto a = ranked_memory(server.socket(), 2, 16, 2);
  auto c = ranked_memory(server.socket(), 2, 16, 2);
  auto b = ranked_memory(server.socket(), 2, 16, 2);
  const Link l = link();
  fill(*a, 0, 2);
  fill(*c, 1, 9);
  ASSERT_EQ(a->rank(0).shared()->publish(rank_block(2, l, 0)), 1u);
  ASSERT_EQ(c->rank(1).shared()->publish(rank_block(9, l, 1)), 1u);
  // Each rank alone finds its piece (a hit the ranked find saw on rank 0 before it gave it up).
  const std::vector<int32_t> alone =
      b->rank(1).shared()->find(rank_key(kRoot, 1), rank_chain(l, 1));
  ASSERT_EQ(alone.size(), 1u);
  b->rank(1).shared()->release(alone);

  EXPECT_TRUE(b->find(kRoot, chain(l)).empty());
  const std::vector<int32_t> a_block{2}, c_block{9};
  EXPECT_EQ(a->rank(0).shared()->withdraw(a_block), a_block);
  EXPECT_EQ(c->rank(1).shared()->withdraw(c_block), c_block);
}

// A block is the owner's to write again only when no rank of any reader holds it: a reader that
// holds rank 0's piece alone keeps it from the owner, whose rank 1 let it go already.
TEST_F(RankedSharedKvTest, AnOwnerWritesABlockAgainOnlyWhenEveryRankLetsIt) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto a = ranked_memory(server.socket(), 2, 16, 2);
  auto b = ranked_memory(server.socket(), 2, 16, 2);
  fill(*a, 0, 7);
  fill(*a, 1, 7);
  const Link l = link();
  ASSERT_EQ(a->publish(block(7, l)), 1u);
  const std::vector<int32_t> held = b->rank(0).shared()->find(rank_key(kRoot, 0), rank_chain(l, 0));
  ASSERT_EQ(held.size(), 1u);

  const std::vector<int32_t> own{7};
  EXPECT_TRUE(a->withdraw(own).empty());
  EXPECT_TRUE(b->find(kRoot, chain(l)).empty());  // rank 1's piece was withdrawn
  b->rank(0).shared()->release(held);
  EXPECT_EQ(a->withdraw(own), own);
}

// What one engine gave: each request's tokens with their logprobs, and its cached prompt tokens.
struct Outputs {
  std::map<std::string, std::vector<std::pair<int32_t, float>>> tokens;
  std::map<std::string, int> cached;
};

// Engines of tensor_parallel 2 on the CPU (in-process ranks, a leased pool per rank): B finds
// the prefix A computed on both ranks, and gives the tokens and logprobs of C, which does not
// share.
TEST_F(RankedSharedKvTest, TensorParallelEnginesShareAPrefixAndGiveTheTokensOfOneThatDoesNot) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 512 * kMiB, 0.5);
  auto store =
      std::make_shared<HostStore>(std::make_shared<HfModel>(HfModel::open(model_dir_.path())));
  constexpr int kTokensPerBlock = 16, kContext = 256;
  const int64_t rank_block =
      CpuBackend::kv_bytes_per_token(store->config(), KvCacheDtype::Auto) / 2 * kTokensPerBlock;
  const int blocks = int(kv_chunk_bytes_for(uint64_t(rank_block)) / uint64_t(rank_block));
  struct Worker {
    std::shared_ptr<KvMemory> memory;
    std::unique_ptr<CpuBackend> backend;
    std::unique_ptr<Engine> engine;
  };
  auto make = [&](bool share) {
    auto client = std::make_shared<ipc::Client>(test::client_of(server.socket()));
    std::vector<std::shared_ptr<KvMemory>> pools;
    for (int r = 0; r < 2; ++r)
      pools.push_back(
          std::make_shared<LeasedKvMemory>(client, rank_block, blocks, blocks, nullptr,
                                           share ? LeasedKvSharing{{}, 1} : LeasedKvSharing{}));
    Worker w;
    w.memory = std::make_shared<RankedKvMemory>(std::move(pools));
    w.backend =
        std::make_unique<CpuBackend>(store, kContext, KvPoolShape{kTokensPerBlock, 0}, w.memory, 2);
    EngineOptions options;
    options.kv_share = share;
    options.tensor_parallel = 2;
    w.engine =
        std::make_unique<Engine>(*w.backend, options, nullptr, std::vector<int32_t>{}, "synthetic");
    return w;
  };
  std::vector<int32_t> prefix(48);
  for (int32_t& t : prefix) t = int32_t(rng_() % uint64_t(store->config().vocab));
  auto request = [&](int i) {
    std::vector<int32_t> prompt = prefix;
    prompt.push_back(int32_t(i));
    Request r{"r" + std::to_string(i), prompt, {}};
    r.settings.sampling.temperature = 0.8f;
    r.settings.sampling.seed = uint64_t(i);
    r.settings.max_tokens = 8;
    r.settings.ignore_eos = true;
    r.settings.logprobs = 2;
    return r;
  };
  auto run = [](Engine& engine) {
    Outputs out;
    while (engine.has_work())
      for (const RequestOutput& o : engine.step()) {
        for (const TokenOutput& t : o.tokens) out.tokens[o.id].push_back({t.token, t.logprob});
        if (o.finish) out.cached[o.id] = o.finish->cached_tokens;
      }
    return out;
  };

  Worker a = make(true);
  a.engine->submit(request(100));
  run(*a.engine);
  EXPECT_EQ(a.engine->stats().kv_share_published_blocks, 3u);  // the prefix's full blocks

  Worker b = make(true), c = make(false);
  for (int i = 0; i < 3; ++i) {
    b.engine->submit(request(i));
    c.engine->submit(request(i));
  }
  const Outputs b_out = run(*b.engine), c_out = run(*c.engine);
  EXPECT_EQ(b_out.tokens.size(), 3u);
  EXPECT_EQ(b_out.tokens, c_out.tokens);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b_out.cached.at("r" + std::to_string(i)), 48);
  EXPECT_GE(b.engine->stats().kv_share_hit_tokens, 48u);
  EXPECT_EQ(c.engine->stats().kv_share_hit_tokens, 0u);
}

}  // namespace
}  // namespace hearth
