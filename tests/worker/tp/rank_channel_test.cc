// The channel's messages for GPU ranks (worker/tp/rank_channel.h): a cuda hello round-trips
// with its engine options and all-reduce share, a cpu hello needs none of them, and a bad
// backend, a cuda hello without its share, or a malformed peers message is refused by name.
// A served rank's leased KV pool (CPU or GPU): its state and the leader's kv_grow / kv_shrink
// round-trip, and a hello that leases without a server is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "tests/support/error_of.h"
#include "worker/tp/rank_channel.h"

namespace hearth {
namespace {

using nlohmann::json;

TpHello cuda_hello() {
  TpHello h;
  h.rank = 1;
  h.world_size = 2;
  h.model_dir = "/models/m";
  h.model_identity = "id";
  h.context_length = 1024;
  h.kv_block_size = 16;
  h.kv_blocks = 64;
  h.barrier_timeout_ms = 1000;
  h.backend = "cuda";
  h.device = 1;
  h.engine = {{"tensor_parallel", 2}, {"cuda_graphs", true}};
  h.all_reduce = {
      {"rank", 0}, {"ranks", 2}, {"capacity", 4096}, {"blocks", 132}, {"bytes", 2 << 20}};
  return h;
}

TEST(RankChannel, ACudaHelloRoundTripsItsDeviceOptionsAndShare) {
  const TpHello got = parse_hello(hello_message(cuda_hello()));
  EXPECT_EQ(got.backend, "cuda");
  EXPECT_EQ(got.device, 1);
  EXPECT_EQ(got.engine, cuda_hello().engine);
  EXPECT_EQ(got.all_reduce, cuda_hello().all_reduce);
}

TEST(RankChannel, ACpuHelloCarriesNoGpuFields) {
  TpHello h = cuda_hello();
  h.backend = "cpu";
  const json m = hello_message(h);
  EXPECT_FALSE(m.contains("all_reduce"));
  EXPECT_FALSE(m.contains("engine"));
  EXPECT_EQ(parse_hello(m).backend, "cpu");
}

TEST(RankChannel, RefusesABadBackendOrACudaHelloWithoutItsShare) {
  json m = hello_message(cuda_hello());
  m["backend"] = "tpu";
  EXPECT_NE(test::error_of([&] { parse_hello(m); }).find("\"backend\""), std::string::npos);
  m = hello_message(cuda_hello());
  m.erase("all_reduce");
  EXPECT_NE(test::error_of([&] { parse_hello(m); }).find("\"all_reduce\""), std::string::npos);
  m = hello_message(cuda_hello());
  m["engine"] = "fast";
  EXPECT_NE(test::error_of([&] { parse_hello(m); }).find("must be objects"), std::string::npos);
}

TEST(RankChannel, AReadyCarriesItsShareAndPeersRoundTrip) {
  const json share = cuda_hello().all_reduce;
  const json ready = ready_message(1, share);
  EXPECT_NO_THROW(expect_ready(ready, 1));
  EXPECT_EQ(ready["all_reduce"], share);
  EXPECT_FALSE(ready_message(1).contains("all_reduce"));
  const std::vector<json> peers = parse_peers(peers_message({share, share}));
  ASSERT_EQ(peers.size(), 2u);
  EXPECT_EQ(peers[1], share);
  EXPECT_TRUE(parse_peers(peers_message({})).empty());
  EXPECT_NE(test::error_of([] { parse_peers(stop_message()); }).find("expected the peers"),
            std::string::npos);
  EXPECT_NE(test::error_of([] {
              parse_peers({{"type", "peers"}, {"all_reduce", {1, 2}}});
            }).find("not an object"),
            std::string::npos);
}

TEST(RankChannel, ALeasedPoolsHelloStateAndResizesRoundTrip) {
  TpHello h = cuda_hello();
  h.model_dir.clear();
  h.server_socket = "/tmp/hearth/sock";
  h.model_name = "m";
  h.kv_leased = true;
  EXPECT_TRUE(parse_hello(hello_message(h)).kv_leased);
  EXPECT_FALSE(parse_hello(hello_message(cuda_hello())).kv_leased);
  h.backend = "cpu";  // CPU ranks lease theirs too (protocol 4)
  EXPECT_TRUE(parse_hello(hello_message(h)).kv_leased);
  json m = hello_message(cuda_hello());
  m["kv_leased"] = true;  // a model directory has no server to lease from
  EXPECT_NE(test::error_of([&] { parse_hello(m); }).find("without a server"), std::string::npos);
  m.erase("kv_leased");
  EXPECT_NE(test::error_of([&] { parse_hello(m); }).find("\"kv_leased\""), std::string::npos);

  const TpKvState state{64, 256, 8, 8, 4096, 8 * (2u << 20)};
  const TpKvState got = parse_kv_state(kv_state_json(state));
  EXPECT_EQ(got.blocks, 64);
  EXPECT_EQ(got.max_blocks, 256);
  EXPECT_EQ(got.blocks_per_chunk, 8);
  EXPECT_EQ(got.chunks, 8);
  EXPECT_EQ(got.block_bytes, 4096);
  EXPECT_EQ(got.bytes, state.bytes);
  json more = kv_state_json(state);
  more["blocks"] = 300;
  EXPECT_NE(test::error_of([&] { parse_kv_state(more); }).find("more blocks than its most"),
            std::string::npos);
  EXPECT_EQ(parse_kv_resize(kv_resize_message(true, 16)), 16);
  EXPECT_EQ(message_type(kv_resize_message(false, 8)), "kv_shrink");
  EXPECT_NE(test::error_of([] { parse_kv_resize(stop_message()); }).find("kv_grow or kv_shrink"),
            std::string::npos);
  EXPECT_NE(test::error_of([] {
              parse_kv_resize({{"type", "kv_grow"}, {"blocks", -1}});
            }).find("\"blocks\""),
            std::string::npos);
}

// A follower's pool as a test sees it: whole chunks of 8 blocks, at most 64.
class ChunkedMemory final : public KvMemory {
 public:
  std::byte* base() const override { return nullptr; }
  int64_t block_bytes() const override { return 4096; }
  int blocks() const override { return blocks_; }
  int max_blocks() const override { return 64; }
  int blocks_per_chunk() const override { return 8; }
  int grow(int blocks) override {
    const int before = blocks_;
    blocks_ = std::min(64, blocks_ + (blocks + 7) / 8 * 8);
    return blocks_ - before;
  }
  int shrink(int keep) override { return blocks_ = std::min(blocks_, (keep + 7) / 8 * 8); }
  int chunks() const override { return blocks_ / 8; }
  uint64_t bytes() const override { return uint64_t(blocks_) * 4096; }

 private:
  int blocks_ = 8;
};

// The follower's side of kv_grow / kv_shrink (CPU and GPU followers share it): the pool resized
// as the message says, and its state after in a "kv" answer the leader parses.
TEST(RankChannel, AFollowerAnswersAResizeWithItsPoolsState) {
  ChunkedMemory memory;
  json answer = answer_kv_resize(memory, kv_resize_message(true, 10));
  EXPECT_EQ(message_type(answer), "kv");
  TpKvState state = parse_kv_state(answer);
  EXPECT_EQ(state.blocks, 24);
  EXPECT_EQ(state.chunks, 3);
  EXPECT_EQ(state.max_blocks, 64);
  EXPECT_EQ(state.bytes, 24u * 4096);
  state = parse_kv_state(answer_kv_resize(memory, kv_resize_message(false, 9)));
  EXPECT_EQ(state.blocks, 16);
  EXPECT_EQ(kv_state_of(memory).blocks, 16);
  EXPECT_NE(test::error_of([&] {
              answer_kv_resize(memory, stop_message());
            }).find("kv_grow or kv_shrink"),
            std::string::npos);
  EXPECT_EQ(memory.blocks(), 16);
}

// A follower's sharing pool as a test sees it: records each call, finds the first `found` of
// the ids asked (or of 100, 101, ... for a plain find), takes every block published, and lets
// even ids be withdrawn.
class RecordingSharedKv final : public SharedKv {
 public:
  int first_foreign_block() const override { return 64; }
  int foreign_capacity() const override { return 64; }
  void set_domain(const BlockKey& d) override { domain = d; }
  std::vector<int32_t> find(const BlockKey& r, std::span<const SharedKvLink> chain) override {
    root = r;
    record(chain);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < std::min(found, chain.size()); ++i) ids.push_back(100 + int32_t(i));
    return ids;
  }
  std::vector<int32_t> find_at(const BlockKey& r, std::span<const SharedKvLink> chain,
                               std::span<const int32_t> ids) override {
    root = r;
    record(chain);
    return {ids.begin(), ids.begin() + long(std::min(found, ids.size()))};
  }
  void release(std::span<const int32_t> ids) override { released.assign(ids.begin(), ids.end()); }
  uint64_t publish(std::span<const SharedKvBlock> blocks) override {
    for (const SharedKvBlock& b : blocks)
      published.push_back({b.block, b.key, b.parent, {b.tokens.begin(), b.tokens.end()}});
    return blocks.size();
  }
  std::vector<int32_t> withdraw(std::span<const int32_t> own) override {
    std::vector<int32_t> free;
    for (int32_t b : own)
      if (b % 2 == 0) free.push_back(b);
    return free;
  }

  struct Published {
    int32_t block;
    BlockKey key, parent;
    std::vector<int32_t> tokens;
  };
  size_t found = 0;
  BlockKey domain, root;
  std::vector<std::pair<BlockKey, std::vector<int32_t>>> links;
  std::vector<int32_t> released;
  std::vector<Published> published;

 private:
  void record(std::span<const SharedKvLink> chain) {
    links.clear();
    for (const SharedKvLink& l : chain)
      links.push_back({l.key, {l.tokens.begin(), l.tokens.end()}});
  }
};

// Every SharedKv call crosses the channel whole: keys in full 64-bit range, tokens, ids and
// counts (the leader's RemoteKvMemory sends these, the follower answers with its pool).
TEST(RankChannel, KvShareCallsRoundTripToAFollowersPool) {
  RecordingSharedKv pool;
  const BlockKey big{~uint64_t(0), uint64_t(1) << 63}, parent{5, 6};
  const std::vector<int32_t> t1 = {1, 2, 3}, t2 = {4, 5, 6};
  const std::vector<SharedKvLink> chain = {{big, t1}, {parent, t2}};

  EXPECT_EQ(message_type(answer_kv_share(pool, kv_share_domain_message(big))), "kv_shared");
  EXPECT_EQ(pool.domain, big);
  pool.found = 1;
  const std::vector<int32_t> ids = {70, 71};
  EXPECT_EQ(parse_kv_shared_ids(answer_kv_share(pool, kv_share_find_message(parent, chain, ids))),
            std::vector<int32_t>{70});
  EXPECT_EQ(pool.root, parent);
  ASSERT_EQ(pool.links.size(), 2u);
  EXPECT_EQ(pool.links[0].first, big);
  EXPECT_EQ(pool.links[1].second, t2);
  pool.found = 2;
  EXPECT_EQ(parse_kv_shared_ids(answer_kv_share(pool, kv_share_find_message(parent, chain, {}))),
            (std::vector<int32_t>{100, 101}));  // no ids: a plain find

  answer_kv_share(pool, kv_share_release_message(ids));
  EXPECT_EQ(pool.released, ids);
  const std::vector<SharedKvBlock> blocks = {{3, big, parent, t1}, {4, parent, big, t2}};
  EXPECT_EQ(parse_kv_shared_count(answer_kv_share(pool, kv_share_publish_message(blocks))), 2u);
  ASSERT_EQ(pool.published.size(), 2u);
  EXPECT_EQ(pool.published[0].block, 3);
  EXPECT_EQ(pool.published[0].key, big);
  EXPECT_EQ(pool.published[1].parent, big);
  EXPECT_EQ(pool.published[1].tokens, t2);
  const std::vector<int32_t> own = {2, 3, 4};
  EXPECT_EQ(parse_kv_shared_ids(answer_kv_share(pool, kv_share_withdraw_message(own))),
            (std::vector<int32_t>{2, 4}));
}

// A follower whose pool does not share (or that leases none) refuses a kv_share by name rather
// than answering for a pool it does not have.
TEST(RankChannel, AKvShareForAPoolThatDoesNotShareIsRefused) {
  ChunkedMemory memory;
  const json m = kv_share_domain_message({1, 2});
  EXPECT_NE(test::error_of([&] { answer_kv_share(&memory, m); }).find("does not share"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              answer_kv_share(static_cast<KvMemory*>(nullptr), m);
            }).find("does not share"),
            std::string::npos);
}

TEST(RankChannel, RefusesKvShareMessagesThatDoNotSayWhatTheyMean) {
  RecordingSharedKv pool;
  const std::vector<int32_t> t = {1};
  const std::vector<SharedKvLink> chain = {{{1, 2}, t}};
  const std::vector<int32_t> one = {70};
  const auto error = [&](json m) { return test::error_of([&] { answer_kv_share(pool, m); }); };
  json m = kv_share_find_message({1, 2}, chain, one);
  m["ids"] = json::array({70, 71});
  EXPECT_NE(error(m).find("one id per link"), std::string::npos);
  m = kv_share_domain_message({1, 2});
  m["domain"] = json::array({1, -2});
  EXPECT_NE(error(m).find("\"domain\" must be a key"), std::string::npos);
  m["op"] = "grow";
  EXPECT_NE(error(m).find("\"op\" must be"), std::string::npos);
  m = kv_share_publish_message({});
  m["blocks"] = json::array({1});
  EXPECT_NE(error(m).find("not an object"), std::string::npos);
  EXPECT_NE(error(stop_message()).find("expected a kv_share"), std::string::npos);
  EXPECT_NE(test::error_of([] {
              parse_kv_shared_ids({{"type", "kv"}});
            }).find("kv_shared"),
            std::string::npos);

  // The hello says whether a follower's pool shares; only a leased one can.
  TpHello h = cuda_hello();
  h.backend = "cpu";
  h.model_dir.clear();
  h.server_socket = "/tmp/hearth/sock";
  h.model_name = "m";
  h.kv_leased = true;
  h.kv_shared = true;
  EXPECT_TRUE(parse_hello(hello_message(h)).kv_shared);
  json hello = hello_message(h);
  hello["kv_leased"] = false;
  EXPECT_NE(test::error_of([&] { parse_hello(hello); }).find("unleased"), std::string::npos);
  // A pool's state names its foreign ids, past its own.
  const TpKvState state{8, 64, 8, 1, 4096, 8 * 4096, 64, 64};
  EXPECT_EQ(parse_kv_state(kv_state_json(state)).foreign_blocks, 64);
  json overlap = kv_state_json(state);
  overlap["foreign_first"] = 32;
  EXPECT_NE(test::error_of([&] { parse_kv_state(overlap); }).find("overlap"), std::string::npos);
}

}  // namespace
}  // namespace hearth
