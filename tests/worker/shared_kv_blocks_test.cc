// The worker's side of prefix KV sharing (issue 22 item 3) against the real server in-process,
// memfd chunks: worker A writes a block of its leased pool and publishes it; worker B finds it
// under the same chain, reads A's bytes through a read-only mapping of A's chunk, and never
// under another salt; B's references hold A's block until B drops them or goes.
#include "worker/shared_kv_blocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>

#include "ipc/protocol.h"
#include "tests/weight-server/daemon/in_process_server.h"
#include "weight-server/model/host_store.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/engine.h"
#include "worker/engine/kv_cache_manager.h"
#include "worker/engine/sequence.h"
#include "worker/leased_kv_memory.h"

namespace hearth {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr int64_t kBlock = 256 * 1024;
constexpr ipc::WireKey kDomain{7, 8};
constexpr ipc::WireKey kRoot{9, 10};

std::shared_ptr<ipc::Client> connect(const std::string& socket) {
  return std::make_shared<ipc::Client>(test::client_of(socket, "shared-kv-test"));
}

// The permissions /proc/self/maps shows for the mapping that holds `p` ("r--s", ...).
std::string permissions_at(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    std::string range, perms;
    in >> range >> perms;
    const size_t dash = range.find('-');
    const uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (at >= lo && at < hi) return perms;
  }
  return "";
}

std::shared_ptr<HostStore> open_store(const std::filesystem::path& dir) {
  return std::make_shared<HostStore>(std::make_shared<HfModel>(HfModel::open(dir)));
}

// The synthetic model with 8 layers: blocks of 64 tokens are 128 KiB, 16 to a chunk.
void write_eight_layer_model(const std::filesystem::path& dir) {
  SynthOptions synth;
  synth.config_overrides = {{"num_hidden_layers", 8}};
  write_synthetic_model(dir, synth);
}

// The pool and engine a served CPU worker runs on a lease of the server.
struct WorkerShape {
  int tokens_per_block = 16;
  int context = 256;
  int max_blocks = 0;  // 0: one chunk's blocks
  int min_blocks = 0;  // 0: max_blocks
  int share_chunks = 1;
  KvCacheDtype kv_dtype = KvCacheDtype::Auto;
};

struct Worker {
  std::shared_ptr<LeasedKvMemory> memory;
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<Engine> engine;
};

// The bytes of one block of `shape` for `store`'s model.
int64_t block_bytes(const HostStore& store, const WorkerShape& shape) {
  return CpuBackend::kv_bytes_per_token(store.config(), shape.kv_dtype) * shape.tokens_per_block;
}

// How many blocks of `shape` one chunk holds.
int blocks_per_chunk(const HostStore& store, const WorkerShape& shape) {
  const int64_t bytes = block_bytes(store, shape);
  return int(kv_chunk_bytes_for(uint64_t(bytes)) / bytes);
}

// A worker of `shape` on a lease of the server at `socket`, kv_share on or off.
Worker make_worker(const std::string& socket, const std::shared_ptr<HostStore>& store,
                   const WorkerShape& shape, bool share) {
  const int max_blocks = shape.max_blocks ? shape.max_blocks : blocks_per_chunk(*store, shape);
  Worker w;
  w.memory = std::make_shared<LeasedKvMemory>(
      connect(socket), block_bytes(*store, shape), max_blocks,
      shape.min_blocks ? shape.min_blocks : max_blocks, nullptr,
      share ? LeasedKvSharing{{}, shape.share_chunks} : LeasedKvSharing{});
  w.backend = std::make_unique<CpuBackend>(
      store, shape.context, KvPoolShape{shape.tokens_per_block, 0}, w.memory, 1,
      std::vector<std::shared_ptr<const WeightStore>>{}, shape.kv_dtype);
  EngineOptions options;
  options.kv_share = share;
  options.kv_cache_dtype = shape.kv_dtype;
  w.engine =
      std::make_unique<Engine>(*w.backend, options, nullptr, std::vector<int32_t>{}, "synthetic");
  return w;
}

// What an engine gave: each request's tokens with their logprobs, and its cached prompt tokens.
struct Outputs {
  std::map<std::string, std::vector<std::pair<int32_t, float>>> tokens;
  std::map<std::string, int> cached;

  void add(const std::vector<RequestOutput>& step) {
    for (const RequestOutput& out : step) {
      for (const TokenOutput& t : out.tokens) tokens[out.id].push_back({t.token, t.logprob});
      if (out.finish) cached[out.id] = out.finish->cached_tokens;
    }
  }
};

// Steps `engine` until it has no work, collecting what it gave.
Outputs run(Engine& engine) {
  Outputs out;
  while (engine.has_work()) out.add(engine.step());
  return out;
}

// A sampled request (temperature 0.8) of exactly `max_tokens` tokens.
Request sampled(std::string id, std::vector<int32_t> prompt, uint64_t seed, int max_tokens,
                int logprobs) {
  Request r{std::move(id), std::move(prompt), {}};
  r.settings.sampling.temperature = 0.8f;
  r.settings.sampling.seed = seed;
  r.settings.max_tokens = max_tokens;
  r.settings.ignore_eos = true;
  r.settings.logprobs = logprobs;
  return r;
}

class SharedKvBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override { write_synthetic_model(model_dir_.path(), SynthOptions{}); }

  // `n` random tokens of `store`'s vocabulary.
  std::vector<int32_t> random_tokens(const HostStore& store, int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = int32_t(rng_() % uint64_t(store.config().vocab));
    return t;
  }

  // Fills `pool`'s block `block` with random bytes (returned in `bytes` when asked) and
  // publishes it through `a` as the one link of a chain from kRoot.
  std::vector<ipc::KvLookupLink> publish_random_block(SharedKvBlocks& a, LeasedKvMemory& pool,
                                                      int block,
                                                      std::vector<std::byte>* bytes = nullptr) {
    std::vector<std::byte> fill(static_cast<size_t>(kBlock));
    for (std::byte& x : fill) x = std::byte(rng_());
    std::memcpy(pool.base() + int64_t(block) * kBlock, fill.data(), fill.size());
    ipc::KvLookupLink link{{rng_(), rng_()}, std::vector<int32_t>(16)};
    for (int32_t& t : link.tokens) t = int32_t(rng_() % 1000);
    const std::vector<ipc::KvPublishBlock> published{
        {pool.place_of_block(block), link.key, kRoot, link.tokens}};
    EXPECT_EQ(a.publish(published), 1u);
    if (bytes) *bytes = std::move(fill);
    return {link};
  }

  test::TempDir model_dir_;
  std::mt19937_64 rng_{std::random_device{}()};
};

TEST_F(SharedKvBlocksTest, WorkerBReadsTheBlockWorkerAComputedThroughAReadOnlyMapping) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto a_server = connect(server.socket());
  auto b_server = connect(server.socket());
  LeasedKvMemory a_pool(a_server, kBlock, 16, 16);
  ASSERT_EQ(a_pool.blocks(), 16);
  SharedKvBlocks a(a_server, kDomain, kBlock, 4);
  SharedKvBlocks b(b_server, kDomain, kBlock, 4);

  // A fills blocks 9 and 10 (in its second chunk) and publishes them as a two-block chain.
  std::vector<std::byte> bytes(2 * kBlock);
  for (std::byte& x : bytes) x = std::byte(rng_());
  std::memcpy(a_pool.base() + 9 * kBlock, bytes.data(), bytes.size());
  std::vector<ipc::KvLookupLink> chain;
  std::vector<ipc::KvPublishBlock> blocks;
  for (int i = 0; i < 2; ++i) {
    ipc::KvLookupLink link{{rng_(), rng_()}, std::vector<int32_t>(16)};
    for (int32_t& t : link.tokens) t = int32_t(rng_() % 1000);
    blocks.push_back(
        {a_pool.place_of_block(9 + i), link.key, i == 0 ? kRoot : chain[0].key, link.tokens});
    chain.push_back(link);
  }
  EXPECT_EQ(blocks[0].place.chunk, blocks[1].place.chunk);
  EXPECT_EQ(a.publish(blocks), 2u);

  const std::vector<SharedKvBlocks::Found> found = b.lookup(kRoot, chain);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(b.references(), 2u);
  EXPECT_EQ(b.mapped_chunks(), 1);
  EXPECT_EQ(std::memcmp(found[0].data, bytes.data(), kBlock), 0);
  EXPECT_EQ(std::memcmp(found[1].data, bytes.data() + kBlock, kBlock), 0);
  EXPECT_EQ(permissions_at(found[0].data), "r--s");
  EXPECT_TRUE(b.lookup({9, 11}, chain).empty());  // another salt: another root

  // A may not write its block again while B reads it; once B drops it, A may.
  const std::vector<ipc::WirePlace> first{blocks[0].place};
  EXPECT_TRUE(a.withdraw(first).empty());
  const std::vector<ipc::WirePlace> b_first{found[0].place};
  b.unref(b_first);
  EXPECT_EQ(b.references(), 1u);
  EXPECT_EQ(a.withdraw(first), std::vector<size_t>{0});
}

// A worker that has mapped more chunks than a lookup may name (the protocol caps the list; 2
// here) names the most recently used; a chunk left out comes back with a descriptor, which is
// closed unused: its block is read where it is mapped already (its reference is still held, so
// it is), and nothing is mapped twice.
TEST_F(SharedKvBlocksTest, ALookupNamesTheMostRecentlyUsedChunksAndReusesOnesLeftOut) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto a_server = connect(server.socket());
  LeasedKvMemory a_pool(a_server, kBlock, 24, 24);  // three chunks of eight blocks
  SharedKvBlocks a(a_server, kDomain, kBlock, 4);
  SharedKvBlocks b(connect(server.socket()), kDomain, kBlock, 4);
  b.set_mapped_named_at_most(2);

  // One block in each of A's chunks, each the first link of a chain of its own.
  std::vector<std::vector<ipc::KvLookupLink>> chains;
  std::vector<std::vector<std::byte>> bytes(3);
  for (int c = 0; c < 3; ++c)
    chains.push_back(publish_random_block(a, a_pool, 8 * c, &bytes[size_t(c)]));
  std::vector<const std::byte*> first_seen;
  std::vector<uint64_t> chunk_ids;
  for (int c = 0; c < 3; ++c) {
    const std::vector<SharedKvBlocks::Found> found = b.lookup(kRoot, chains[size_t(c)]);
    ASSERT_EQ(found.size(), 1u);
    first_seen.push_back(found[0].data);
    chunk_ids.push_back(found[0].place.chunk);
  }
  ASSERT_EQ(b.chunk_maps(), 3u);

  // Chunk 0 is the least recently used: left out of the list, passed again, not mapped again.
  const std::vector<uint64_t> named = b.mapped_to_name();
  EXPECT_EQ(named.size(), 2u);
  EXPECT_EQ(std::ranges::count(named, chunk_ids[0]), 0);
  const std::vector<SharedKvBlocks::Found> again = b.lookup(kRoot, chains[0]);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].data, first_seen[0]);
  EXPECT_EQ(std::memcmp(again[0].data, bytes[0].data(), kBlock), 0);
  EXPECT_EQ(b.chunk_maps(), 3u);
  EXPECT_EQ(b.mapped_chunks(), 3);
  EXPECT_EQ(b.references(), 4u);
}

// A foreign chunk stays mapped exactly while a reference into it is held: the last unref unmaps
// it (the range is reserved address space there again), so a chunk the server evicts once
// nobody references it is not kept alive by a reader's mapping. Found again, it is mapped again
// and reads the same bytes.
TEST_F(SharedKvBlocksTest, AForeignChunkIsUnmappedWithItsLastReference) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto a_server = connect(server.socket());
  LeasedKvMemory a_pool(a_server, kBlock, 8, 8);
  SharedKvBlocks a(a_server, kDomain, kBlock, 4);
  SharedKvBlocks b(connect(server.socket()), kDomain, kBlock, 4);
  std::vector<std::byte> bytes;
  const std::vector<ipc::KvLookupLink> chain = publish_random_block(a, a_pool, 2, &bytes);

  // Two sequences hold the block; the first to let go leaves the chunk mapped.
  const std::vector<SharedKvBlocks::Found> first = b.lookup(kRoot, chain);
  const std::vector<SharedKvBlocks::Found> second = b.lookup(kRoot, chain);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  ASSERT_EQ(first[0].data, second[0].data);
  const std::vector<ipc::WirePlace> place{first[0].place};
  b.unref(place);
  EXPECT_EQ(b.mapped_chunks(), 1);
  EXPECT_EQ(permissions_at(first[0].data), "r--s");
  b.unref(place);
  EXPECT_EQ(b.references(), 0u);
  EXPECT_EQ(b.mapped_chunks(), 0);
  EXPECT_EQ(b.chunk_unmaps(), 1u);
  EXPECT_EQ(permissions_at(first[0].data), "---p");

  const std::vector<SharedKvBlocks::Found> again = b.lookup(kRoot, chain);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(b.chunk_maps(), 2u);
  EXPECT_EQ(std::memcmp(again[0].data, bytes.data(), kBlock), 0);
}

// Over its life a worker finds blocks in more distinct chunks than it has slots for: a slot
// whose chunk lost its last reference takes the next chunk (with every slot kept mapped, this
// lookup found nothing).
TEST_F(SharedKvBlocksTest, ASlotFreedByTheLastUnrefTakesTheNextChunk) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto a_server = connect(server.socket());
  LeasedKvMemory a_pool(a_server, kBlock, 16, 16);  // two chunks of eight blocks
  SharedKvBlocks a(a_server, kDomain, kBlock, 4);
  SharedKvBlocks b(connect(server.socket()), kDomain, kBlock, 1);  // one slot
  std::vector<std::vector<ipc::KvLookupLink>> chains;
  for (int c = 0; c < 2; ++c) chains.push_back(publish_random_block(a, a_pool, 8 * c));
  const std::vector<SharedKvBlocks::Found> x = b.lookup(kRoot, chains[0]);
  ASSERT_EQ(x.size(), 1u);
  EXPECT_TRUE(b.lookup(kRoot, chains[1]).empty());  // the one slot is X's while it is held
  const std::vector<ipc::WirePlace> x_place{x[0].place};
  b.unref(x_place);
  const std::vector<SharedKvBlocks::Found> y = b.lookup(kRoot, chains[1]);
  ASSERT_EQ(y.size(), 1u);
  EXPECT_NE(y[0].place.chunk, x[0].place.chunk);
  EXPECT_EQ(y[0].data, x[0].data);  // the same slot
  EXPECT_EQ(b.references(), 1u);
}

TEST_F(SharedKvBlocksTest, AWorkerThatGoesDropsItsReferences) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto a_server = connect(server.socket());
  LeasedKvMemory a_pool(a_server, kBlock, 8, 8);
  SharedKvBlocks a(a_server, kDomain, kBlock, 4);
  ipc::KvLookupLink link{{rng_(), rng_()}, {1, 2, 3}};
  const std::vector<ipc::KvPublishBlock> blocks{
      {a_pool.place_of_block(0), link.key, kRoot, link.tokens}};
  ASSERT_EQ(a.publish(blocks), 1u);
  const std::vector<ipc::KvLookupLink> chain{link};
  {
    auto b_server = connect(server.socket());
    SharedKvBlocks b(b_server, kDomain, kBlock, 4);
    ASSERT_EQ(b.lookup(kRoot, chain).size(), 1u);
    ASSERT_EQ(b.lookup(kRoot, chain).size(), 1u);
    const std::vector<ipc::WirePlace> place{blocks[0].place};
    EXPECT_TRUE(a.withdraw(place).empty());
  }
  // B's destructor gave both references back before its connection closed.
  const std::vector<ipc::WirePlace> place{blocks[0].place};
  EXPECT_EQ(a.withdraw(place), std::vector<size_t>{0});
}

// A lookup whose chunk cannot be mapped (here: a range with no room where the slot would go; on
// the GPU, a driver that refuses read-only access) holds none of the server's references after
// it throws: A may write its block again at once.
TEST_F(SharedKvBlocksTest, ALookupThatCannotMapAChunkGivesItsReferencesBack) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto a_server = connect(server.socket());
  auto b_server = connect(server.socket());
  LeasedKvMemory a_pool(a_server, kBlock, 8, 8);
  SharedKvBlocks a(a_server, kDomain, kBlock, 4);
  ipc::KvLookupLink link{{rng_(), rng_()}, {4, 5, 6}};
  const std::vector<ipc::KvPublishBlock> blocks{
      {a_pool.place_of_block(3), link.key, kRoot, link.tokens}};
  ASSERT_EQ(a.publish(blocks), 1u);

  const uint64_t chunk = kv_chunk_bytes_for(uint64_t(kBlock));
  const std::unique_ptr<KvChunkRange> range = reserve_memfd_kv_range(chunk);
  // One slot promised, starting where the range ends: the first mapping is outside it.
  SharedKvBlocks b(b_server, kDomain, kBlock, 1, *range, chunk);
  const std::vector<ipc::KvLookupLink> chain{link};
  EXPECT_THROW(b.lookup(kRoot, chain), std::runtime_error);
  EXPECT_EQ(b.references(), 0u);
  EXPECT_EQ(b.mapped_chunks(), 0);
  const std::vector<ipc::WirePlace> place{blocks[0].place};
  EXPECT_EQ(a.withdraw(place), std::vector<size_t>{0});  // nobody references it on the server
}

// The engine's view (SharedKv) of a leased pool with sharing on: a block worker A computed is a
// block id of worker B's own address space, past B's pool, holding A's bytes read-only.
TEST_F(SharedKvBlocksTest, ALeasedPoolFindsAnotherWorkersBlocksAsIdsPastItsOwn) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  const BlockKey domain{3, 4}, root{5, 6};
  LeasedKvMemory a(connect(server.socket()), kBlock, 16, 16, nullptr, {domain, 2});
  LeasedKvMemory b(connect(server.socket()), kBlock, 16, 8, nullptr, {domain, 2});
  LeasedKvMemory other(connect(server.socket()), kBlock, 16, 8, nullptr, {{3, 5}, 2});
  EXPECT_EQ(b.first_foreign_block(), 16);
  EXPECT_EQ(b.foreign_capacity(), 16);

  std::vector<std::byte> bytes(kBlock);
  for (std::byte& x : bytes) x = std::byte(rng_());
  std::memcpy(a.base() + 12 * kBlock, bytes.data(), bytes.size());
  std::vector<int32_t> tokens(16);
  for (int32_t& t : tokens) t = int32_t(rng_() % 1000);
  const BlockKey key{rng_(), rng_()};
  const std::vector<SharedKvBlock> published{{12, key, root, tokens}};
  EXPECT_EQ(a.publish(published), 1u);

  const std::vector<SharedKvLink> chain{{key, tokens}};
  const std::vector<int32_t> found = b.find(root, chain);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_GE(found[0], b.first_foreign_block());
  EXPECT_LT(found[0], b.first_foreign_block() + b.foreign_capacity());
  EXPECT_EQ(std::memcmp(b.base() + int64_t(found[0]) * kBlock, bytes.data(), kBlock), 0);
  EXPECT_EQ(permissions_at(b.base() + int64_t(found[0]) * kBlock), "r--s");
  EXPECT_TRUE(other.find(root, chain).empty());  // another cache domain

  // A writes block 12 again only once B gave it back.
  const std::vector<int32_t> own{12};
  EXPECT_TRUE(a.withdraw(own).empty());
  b.release(found);
  EXPECT_EQ(a.withdraw(own), own);
}

// The engine's bookkeeping over two real leased pools: worker B's KvCacheManager takes the full
// blocks worker A's published, only once A flushed them (after its step), holds them as foreign
// ids past its own pool and gives them back when its sequence is freed; A never hands a block
// out for writing while B still reads it (pinned), and does once B gave it back.
TEST_F(SharedKvBlocksTest, ACacheManagerSharesPublishedBlocksAndNeverReusesOnesAnotherReads) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  const BlockKey domain{3, 4};
  LeasedKvMemory a_mem(connect(server.socket()), kBlock, 16, 16, nullptr, {domain, 1});
  LeasedKvMemory b_mem(connect(server.socket()), kBlock, 16, 16, nullptr, {domain, 1});
  constexpr int kTokensPerBlock = 4;
  KvCacheManager a(a_mem.blocks(), kTokensPerBlock, true, true);
  KvCacheManager b(b_mem.blocks(), kTokensPerBlock, true, true);
  a.share(a_mem.shared());
  b.share(b_mem.shared());
  ASSERT_TRUE(a.sharing() && b.sharing());

  Sequence sa;
  sa.id = 1;
  for (int i = 0; i < 18; ++i) sa.tokens.push_back(int32_t(rng_() % 1000));
  sa.chain_root = chain_root_key(domain, "");
  Sequence sb = sa;
  sb.id = 7;
  ASSERT_TRUE(a.allocate(sa.id, 18));
  const std::vector<int32_t> a_table(a.block_table(sa.id).begin(), a.block_table(sa.id).end());
  std::vector<std::byte> bytes(size_t(kBlock) * 4);
  for (std::byte& x : bytes) x = std::byte(rng_());
  for (int j = 0; j < 4; ++j)
    std::memcpy(a_mem.base() + int64_t(a_table[j]) * kBlock, bytes.data() + j * kBlock, kBlock);
  sa.computed = 18;
  a.cache_full_blocks(sa, 0, 18);  // four full blocks, queued

  int shared = -1;
  EXPECT_EQ(b.reuse_cached_blocks(sb, &shared), 0);  // nothing published before the flush
  EXPECT_EQ(shared, 0);
  b.free(sb.id);
  a.publish_queued();
  EXPECT_EQ(a.shared_published_blocks(), 4u);

  // B takes the four (never the block of its last token) as blocks past its own pool.
  EXPECT_EQ(b.reuse_cached_blocks(sb, &shared), 16);
  EXPECT_EQ(shared, 16);
  EXPECT_EQ(sb.computed, 16);
  const std::span<const int32_t> b_table = b.block_table(sb.id);
  ASSERT_EQ(b_table.size(), 4u);
  for (int j = 0; j < 4; ++j) {
    EXPECT_GE(b_table[j], b_mem.first_foreign_block());
    EXPECT_EQ(
        std::memcmp(b_mem.base() + int64_t(b_table[j]) * kBlock, bytes.data() + j * kBlock, kBlock),
        0);
  }
  EXPECT_EQ(b.pool().used(), 0);  // foreign blocks are not in B's pool
  ASSERT_TRUE(b.allocate(sb.id, 19));
  EXPECT_LT(b.block_table(sb.id)[4], b_mem.first_foreign_block());

  // A's sequence ends: its published blocks are free and cached. Taking the whole pool must
  // write them, and B reads them: they stay pinned, and the allocation fails.
  a.free(sa.id);
  const int total = a.pool().total();
  EXPECT_FALSE(a.allocate(2, total * kTokensPerBlock));
  EXPECT_EQ(a.pinned_blocks(), 4);
  ASSERT_TRUE(a.allocate(2, (total - 4) * kTokensPerBlock));
  for (int32_t block : a.block_table(2))
    for (int j = 0; j < 4; ++j) EXPECT_NE(block, a_table[j]);
  a.free(2);

  // B gives them back with its sequence; then A may write them again.
  b.free(sb.id);
  ASSERT_TRUE(a.allocate(3, total * kTokensPerBlock));
  EXPECT_EQ(a.pinned_blocks(), 0);
  a.free(3);
  EXPECT_EQ(connect(server.socket())->call(ipc::op::kStats).body["kv_share"]["blocks"], 0);
}

// The CPU backend's view of a sharing pool: other workers' block ids are admitted only for
// positions a forward reads, never for the positions it writes (a worker never writes a block
// it did not allocate), and ids past the foreign slots are refused like any outside the pool.
TEST_F(SharedKvBlocksTest, TheCpuBackendNeverWritesAForeignBlock) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  auto store = open_store(model_dir_.path());
  constexpr int kTokensPerBlock = 16;
  auto memory = std::make_shared<LeasedKvMemory>(connect(server.socket()),
                                                 block_bytes(*store, {kTokensPerBlock}), 4, 4,
                                                 nullptr, LeasedKvSharing{{3, 4}, 1});
  CpuBackend cpu(store, 64, {kTokensPerBlock, 0}, memory);
  const KvPoolShape view = cpu.kv_pool();
  EXPECT_EQ(view.foreign_first, memory->max_blocks());
  EXPECT_EQ(view.foreign_blocks, memory->foreign_capacity());
  ASSERT_GT(view.foreign_blocks, 0);

  const std::vector<int32_t> tokens{1, 2, 3};
  auto forward = [&](int start, std::vector<int32_t> table) {
    ForwardBatch batch;
    batch.entries.push_back({tokens, start, table, true});
    cpu.forward(batch);
  };
  // Writing positions 0-2 into a foreign block, or position 16 into one: refused.
  EXPECT_THROW(forward(0, {view.foreign_first}), std::runtime_error);
  EXPECT_THROW(forward(16, {0, view.foreign_first}), std::runtime_error);
  EXPECT_THROW(forward(0, {view.foreign_first + view.foreign_blocks}), std::runtime_error);
  EXPECT_NO_THROW(forward(0, {0}));  // an own block
}

// Engines on leased pools of one server, as served workers run them. B's pool is too small for
// its requests, so it preempts and recomputes; it reads A's prefix blocks each time it admits a
// request and gives them back as its sequences go. Its tokens and logprobs are those of C, the
// same engine with kv_share off, and once it is done nothing of A's is referenced any more.
TEST_F(SharedKvBlocksTest, EnginesSharingUnderPreemptionGiveTheTokensOfOneThatDoesNot) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 512 * kMiB, 0.5);
  auto store = open_store(model_dir_.path());
  const WorkerShape shape;  // 16 tokens a block, one chunk of blocks
  const int pool_blocks = blocks_per_chunk(*store, shape);
  const std::vector<int32_t> prefix = random_tokens(*store, 48);
  auto request = [&](int i, int max_tokens) {
    std::vector<int32_t> prompt = prefix;
    prompt.push_back(int32_t(i));
    return sampled("r" + std::to_string(i), prompt, uint64_t(i), max_tokens, 2);
  };

  Worker a = make_worker(server.socket(), store, shape, true);
  a.engine->submit(request(100, 1));
  run(*a.engine);
  EXPECT_EQ(a.engine->stats().kv_share_published_blocks, 3u);  // the prefix's full blocks

  // More requests of 49 + 180 positions (15 blocks, 12 of them own) than the pool holds at once.
  const int n = pool_blocks / 12 + 6;
  Worker b = make_worker(server.socket(), store, shape, true);
  Worker c = make_worker(server.socket(), store, shape, false);
  for (int i = 0; i < n; ++i) {
    b.engine->submit(request(i, 180));
    c.engine->submit(request(i, 180));
  }
  const Outputs b_out = run(*b.engine), c_out = run(*c.engine);
  const EngineStats bs = b.engine->stats();
  EXPECT_GT(bs.preemptions, 0u) << pool_blocks << " blocks";
  EXPECT_EQ(int(b_out.tokens.size()), n);
  EXPECT_EQ(b_out.tokens, c_out.tokens);
  // A's three blocks, found by every request (B never caches them itself); C finds its own.
  for (int i = 0; i < n; ++i) EXPECT_EQ(b_out.cached.at("r" + std::to_string(i)), 48);
  EXPECT_EQ(c.engine->stats().kv_share_hit_tokens, 0u);
  EXPECT_FALSE(c.engine->stats().kv_share);
  EXPECT_GE(bs.kv_share_hit_tokens, uint64_t(n) * 48);
  EXPECT_EQ(bs.kv_share_hit_blocks * uint64_t(shape.tokens_per_block), bs.kv_share_hit_tokens);
  EXPECT_EQ(bs.kv_blocks_used, 0);

  // Nobody reads A's blocks any more: every one of them is A's to write again.
  std::vector<int32_t> all(size_t(a.memory->blocks()));
  for (int32_t i = 0; i < a.memory->blocks(); ++i) all[size_t(i)] = i;
  EXPECT_EQ(a.memory->withdraw(all), all);
}

// A request that cannot be admitted for lack of blocks asks the server for other workers' blocks
// once, not at every step it waits: the next lookup waits until blocks were freed. B's pool is
// one chunk, all of it taken by X; Y (A's prefix + 1 token) waits through X's decode steps.
// Y still reads A's blocks once admitted, and its tokens are those of C, with kv_share off.
TEST_F(SharedKvBlocksTest, AWaitingRequestLooksUpOnceUntilBlocksAreFreed) {
  test::TempDir dir;
  write_eight_layer_model(dir.path());
  test::InProcessServer server({}, dir.path(), nullptr, 512 * kMiB, 0.5);
  auto store = open_store(dir.path());
  WorkerShape shape;
  shape.tokens_per_block = 64;
  shape.context = 1024;
  ASSERT_EQ(blocks_per_chunk(*store, shape), 16);
  const std::vector<int32_t> prefix = random_tokens(*store, 2 * shape.tokens_per_block);
  std::vector<int32_t> y_prompt = prefix;
  y_prompt.push_back(1);
  // X's prompt takes 15 blocks, its decode the 16th: all of B's pool.
  const Request x = sampled("x", random_tokens(*store, 15 * shape.tokens_per_block), 11, 60, 1);
  const Request y = sampled("y", y_prompt, 11, 8, 1);

  Worker a = make_worker(server.socket(), store, shape, true);
  a.engine->submit(sampled("a", prefix, 11, 1, 1));
  while (a.engine->has_work()) a.engine->step();
  ASSERT_EQ(a.engine->stats().kv_share_published_blocks, 2u);

  // X first, until it decodes (its 16th block taken), then Y beside it, to the end of both.
  auto run_x_then_y = [&](Engine& engine, Outputs& out, uint64_t* lookups_while_y) {
    engine.submit(x);
    bool y_sent = false;
    uint64_t at_y = 0, steps_y_waited = 0;
    while (engine.has_work()) {
      out.add(engine.step());
      if (!y_sent && out.tokens["x"].size() >= 2) {
        engine.submit(y);
        y_sent = true;
        at_y = engine.stats().kv_share_lookups;
      } else if (y_sent && out.tokens["y"].empty()) {
        ++steps_y_waited;
      }
    }
    if (lookups_while_y) *lookups_while_y = engine.stats().kv_share_lookups - at_y;
    return steps_y_waited;
  };
  Worker b = make_worker(server.socket(), store, shape, true);
  Worker c = make_worker(server.socket(), store, shape, false);
  Outputs b_out, c_out;
  uint64_t lookups_while_y = 0;
  const uint64_t waited = run_x_then_y(*b.engine, b_out, &lookups_while_y);
  run_x_then_y(*c.engine, c_out, nullptr);
  EXPECT_GE(waited, 50u);  // X's decode steps: Y had no block
  // One lookup that found A's blocks but no block of its own, one when X's blocks came back.
  EXPECT_LE(lookups_while_y, 2u) << "Y waited " << waited << " steps";
  EXPECT_EQ(b_out.cached["y"], 2 * shape.tokens_per_block);
  EXPECT_EQ(b_out.tokens, c_out.tokens);
  EXPECT_EQ(b_out.tokens["y"].size(), 8u);
}

// A waiting request is looked up before its worker's lease is sized: the blocks another worker
// computed for its prefix take no room in the pool, so the lease grows only for what the request
// still computes. B's pool starts at one chunk (16 blocks); its request needs 25 blocks, 24 of
// them A's. B asks the server for no block; C (kv_share off) asks for the 9 it lacks. Same
// tokens.
TEST_F(SharedKvBlocksTest, ALeaseGrowsOnlyForTheBlocksASharedPrefixLeavesToCompute) {
  test::TempDir dir;
  write_eight_layer_model(dir.path());
  test::InProcessServer server({}, dir.path(), nullptr, 512 * kMiB, 0.5);
  auto store = open_store(dir.path());
  constexpr int kPrefixBlocks = 24;
  WorkerShape shape;
  shape.tokens_per_block = 64;
  shape.context = 2048;
  shape.share_chunks = 4;
  const int per_chunk = blocks_per_chunk(*store, shape);
  ASSERT_EQ(per_chunk, 16);
  shape.max_blocks = 4 * per_chunk;
  const std::vector<int32_t> prompt =
      random_tokens(*store, kPrefixBlocks * shape.tokens_per_block + 1);

  shape.min_blocks = 2 * per_chunk;
  Worker a = make_worker(server.socket(), store, shape, true);
  a.engine->submit(sampled("a", std::vector<int32_t>(prompt.begin(), prompt.end() - 1), 5, 1, 1));
  run(*a.engine);
  ASSERT_EQ(a.engine->stats().kv_share_published_blocks, uint64_t(kPrefixBlocks));

  shape.min_blocks = per_chunk;
  Worker b = make_worker(server.socket(), store, shape, true);
  Worker c = make_worker(server.socket(), store, shape, false);
  ASSERT_EQ(b.memory->blocks(), per_chunk);
  b.engine->submit(sampled("r", prompt, 5, 8, 1));
  c.engine->submit(sampled("r", prompt, 5, 8, 1));
  const Outputs b_out = run(*b.engine), c_out = run(*c.engine);
  const EngineStats bs = b.engine->stats(), cs = c.engine->stats();
  // The cause: B's lookup found A's 24 blocks before B sized its lease, so it lacked nothing;
  // the same request without sharing lacked 25 - 16 blocks and grew the lease for them.
  EXPECT_EQ(b_out.cached.at("r"), kPrefixBlocks * shape.tokens_per_block);
  EXPECT_EQ(bs.kv_share_hit_blocks, uint64_t(kPrefixBlocks));
  EXPECT_EQ(bs.kv_share_lookups, 1u);  // the lookup before the lease was the admission's
  EXPECT_EQ(bs.kv_lease_asked_blocks, 0u);
  EXPECT_EQ(bs.kv_lease_grows, 0u);
  EXPECT_EQ(cs.kv_lease_asked_blocks, uint64_t(kPrefixBlocks + 1 - per_chunk));
  EXPECT_GE(cs.kv_lease_grows, 1u);
  EXPECT_EQ(c_out.cached.at("r"), 0);
  EXPECT_EQ(b_out.tokens.at("r").size(), 8u);
  EXPECT_EQ(b_out.tokens, c_out.tokens);
}

// Issue 25's fp8 KV cache (kv_cache_dtype fp8_e4m3) in a leased pool: its blocks (codes, then
// scales, one piece) are published and read by another worker like 16-bit ones, and the reader
// gives the tokens of a worker that computed everything itself.
TEST_F(SharedKvBlocksTest, Fp8KvBlocksAreSharedAndGiveTheSameTokens) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 512 * kMiB, 0.5);
  auto store = open_store(model_dir_.path());
  WorkerShape shape;
  shape.context = 128;
  shape.kv_dtype = KvCacheDtype::Fp8E4m3;
  const std::vector<int32_t> prefix = random_tokens(*store, 48);
  auto request = [&](int i, int max_tokens) {
    std::vector<int32_t> prompt = prefix;
    prompt.push_back(int32_t(i));
    return sampled("r" + std::to_string(i), prompt, uint64_t(i), max_tokens, 0);
  };
  Worker a = make_worker(server.socket(), store, shape, true);
  a.engine->submit(request(100, 1));
  run(*a.engine);
  EXPECT_EQ(a.engine->stats().kv_share_published_blocks, 3u);  // the prefix's full blocks

  Worker b = make_worker(server.socket(), store, shape, true);
  Worker c = make_worker(server.socket(), store, shape, false);
  for (int i = 0; i < 4; ++i) {
    b.engine->submit(request(i, 24));
    c.engine->submit(request(i, 24));
  }
  const Outputs b_out = run(*b.engine), c_out = run(*c.engine);
  EXPECT_EQ(b_out.tokens.size(), 4u);
  EXPECT_EQ(b_out.tokens, c_out.tokens);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b_out.cached.at("r" + std::to_string(i)), 48);
  EXPECT_GE(b.engine->stats().kv_share_hit_tokens, uint64_t(48));
  EXPECT_EQ(c.engine->stats().kv_share_hit_tokens, 0u);
}

}  // namespace
}  // namespace hearth
