// Prefix KV shared across workers through the real server (issue 22 item 3), over a real socket
// with memfd chunks: a block worker A published is found by worker B, whose FD maps the bytes A
// wrote; references per worker; a killed owner's chunk stays for its readers and goes once
// nobody reads it and memory is needed; forged places and messages are refused, changing
// nothing.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "in_process_server.h"
#include "ipc/client.h"
#include "ipc/errors.h"
#include "ipc/kv_share_protocol.h"
#include "weight-server/sharing/kv_chunk.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using ipc::ErrorCode;

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr uint64_t kChunk = 2 * kMiB;
constexpr uint64_t kBlock = 256 * 1024;  // 8 blocks per chunk
constexpr ipc::WireKey kDomain{101, 102};
constexpr ipc::WireKey kRoot{201, 202};

ipc::Client connect(const std::string& socket) {
  return test::client_of(socket, "kv-share-test");
}

ipc::Frame lease(ipc::Client& c, uint64_t chunks) {
  return c.call(ipc::op::kKvLease, ipc::make_kv_lease_args({kChunk, chunks, 0}));
}

// A chain of random blocks, as the engine's prefix cache would key them.
struct Chain {
  std::vector<ipc::WireKey> keys;
  std::vector<std::vector<int32_t>> tokens;
  Chain(int n, std::mt19937_64& rng) {
    for (int i = 0; i < n; ++i) {
      keys.push_back({rng(), rng()});
      std::vector<int32_t> t(16);
      for (int32_t& x : t) x = int32_t(rng() % 100000);
      tokens.push_back(t);
    }
  }
  ipc::KvPublishRequest publish(uint64_t chunk, int n) const {
    ipc::KvPublishRequest r{kDomain, kBlock, {}};
    for (int i = 0; i < n; ++i)
      r.blocks.push_back(
          {{chunk, uint64_t(i) * kBlock}, keys[i], i == 0 ? kRoot : keys[i - 1], tokens[i]});
    return r;
  }
  ipc::KvLookupRequest lookup(std::vector<uint64_t> mapped = {}, ipc::WireKey root = kRoot) const {
    ipc::KvLookupRequest r{kDomain, kBlock, root, {}, std::move(mapped)};
    for (size_t i = 0; i < keys.size(); ++i) r.chain.push_back({keys[i], tokens[i]});
    return r;
  }
};

// A mapping of a chunk FD, unmapped when it goes.
struct Mapping {
  void* p = MAP_FAILED;
  Mapping(int fd, int prot) : p(::mmap(nullptr, kChunk, prot, MAP_SHARED, fd, 0)) {}
  ~Mapping() {
    if (p != MAP_FAILED) ::munmap(p, kChunk);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  unsigned char* bytes() const { return static_cast<unsigned char*>(p); }
};

// The places a lookup's reply found (checked as the worker checks it).
std::vector<ipc::WirePlace> places_found(const ipc::Frame& reply) {
  return ipc::parse_kv_lookup_reply(reply.body, reply.fds.size(), ipc::kMaxKvShareBlocks).places;
}

json share_stats(ipc::Client& c) {
  return c.call(ipc::op::kStats).body.at("kv_share");
}

json stats(ipc::Client& c) {
  return c.call(ipc::op::kStats).body;
}

class KvShareTest : public ::testing::Test {
 protected:
  void SetUp() override { write_synthetic_model(model_dir_.path(), SynthOptions{}); }
  test::TempDir model_dir_;
  std::mt19937_64 rng_{std::random_device{}()};
};

TEST_F(KvShareTest, ABlockWorkerAPublishedIsReadByWorkerBFromTheSameMemory) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  ipc::Client a = connect(server.socket());
  ipc::Client b = connect(server.socket());
  ipc::Frame leased = lease(a, 1);
  ASSERT_EQ(leased.fds.size(), 1u);
  const uint64_t chunk = leased.body["chunks"][0].get<uint64_t>();
  Mapping mine(leased.fds[0].get(), PROT_READ | PROT_WRITE);
  ASSERT_NE(mine.p, MAP_FAILED);
  // A "computes" three blocks, then publishes the two whose step succeeded.
  std::vector<unsigned char> pattern(2 * kBlock);
  for (unsigned char& x : pattern) x = static_cast<unsigned char>(rng_());
  std::memcpy(mine.bytes(), pattern.data(), pattern.size());
  Chain chain(3, rng_);
  json published =
      a.call(ipc::op::kKvPublish, ipc::make_kv_publish_args(chain.publish(chunk, 2))).body;
  EXPECT_EQ(published["published"], 2);
  EXPECT_TRUE(published["refused"].empty());

  ipc::Frame found = b.call(ipc::op::kKvLookup, ipc::make_kv_lookup_args(chain.lookup()));
  ASSERT_EQ(places_found(found).size(), 2u);
  EXPECT_EQ(places_found(found)[1].offset, kBlock);
  ASSERT_EQ(found.body["chunks"], json::array({chunk}));
  EXPECT_EQ(found.body["chunk_bytes"], json::array({kChunk}));
  ASSERT_EQ(found.fds.size(), 1u);
  check_kv_chunk_memfd(found.fds[0].get(), kChunk, "shared chunk");
  // B's descriptor is read-only: no mapping of it can be made writable.
  EXPECT_EQ(::fcntl(found.fds[0].get(), F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(::mmap(nullptr, kChunk, PROT_READ | PROT_WRITE, MAP_SHARED, found.fds[0].get(), 0),
            MAP_FAILED);
  Mapping theirs(found.fds[0].get(), PROT_READ);
  ASSERT_NE(theirs.p, MAP_FAILED);
  EXPECT_EQ(std::memcmp(theirs.bytes(), pattern.data(), pattern.size()), 0);

  // Mapped already: no second FD. Another salt (another root): no hit.
  ipc::Frame again = b.call(ipc::op::kKvLookup, ipc::make_kv_lookup_args(chain.lookup({chunk})));
  EXPECT_EQ(places_found(again).size(), 2u);
  EXPECT_TRUE(again.fds.empty());
  ipc::Frame salted =
      b.call(ipc::op::kKvLookup, ipc::make_kv_lookup_args(chain.lookup({}, {201, 203})));
  EXPECT_TRUE(places_found(salted).empty());
  EXPECT_TRUE(salted.fds.empty());

  // A may not write block 0 again while B reads it; block 2 was never published.
  const std::vector<ipc::WirePlace> take{{chunk, 0}, {chunk, 2 * kBlock}};
  json withdrawn = a.call(ipc::op::kKvWithdraw, ipc::make_kv_places_args(take)).body;
  EXPECT_EQ(withdrawn["referenced"], json::array({0}));
  EXPECT_EQ(withdrawn["withdrawn"], json::array({1}));

  // B holds two references per block; dropping them frees block 0 for A.
  const std::vector<ipc::WirePlace> refs{{chunk, 0}, {chunk, 0}, {chunk, kBlock}, {chunk, kBlock}};
  EXPECT_EQ(b.call(ipc::op::kKvUnref, ipc::make_kv_places_args(refs)).body["unreferenced"], 4);
  withdrawn = a.call(ipc::op::kKvWithdraw, ipc::make_kv_places_args(take)).body;
  EXPECT_EQ(withdrawn["withdrawn"], json::array({0, 1}));
  EXPECT_EQ(share_stats(a)["blocks"], 1);
}

TEST_F(KvShareTest, AKilledOwnersChunkStaysForItsReadersAndIsEvictedWhenMemoryIsNeeded) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  ipc::Client b = connect(server.socket());
  Chain chain(2, rng_);
  uint64_t chunk = 0;
  {
    ipc::Client a = connect(server.socket());
    ipc::Frame leased = lease(a, 2);
    chunk = leased.body["chunks"][0].get<uint64_t>();
    a.call(ipc::op::kKvPublish, ipc::make_kv_publish_args(chain.publish(chunk, 2)));
    ASSERT_EQ(
        places_found(b.call(ipc::op::kKvLookup, ipc::make_kv_lookup_args(chain.lookup()))).size(),
        2u);
  }
  // A's connection closed: its unpublished chunk goes, the published one stays, the server's.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);  // against a hang only
  while (stats(b)["clients"] != 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  json s = stats(b);
  EXPECT_EQ(s["kv_chunks"], 1);
  EXPECT_EQ(s["kv_share"]["orphaned_chunks"], 1);
  EXPECT_EQ(s["memory"]["kv_bytes"], kChunk);
  ipc::Frame found = b.call(ipc::op::kKvLookup, ipc::make_kv_lookup_args(chain.lookup()));
  EXPECT_EQ(places_found(found).size(), 2u);
  EXPECT_EQ(found.fds.size(), 1u);

  // B takes what the budget has left: the orphan stays while B reads it...
  const uint64_t room = s["memory"]["free_bytes"].get<uint64_t>() / kChunk;
  ASSERT_GE(room, 1u);
  ipc::Client c = connect(server.socket());
  EXPECT_EQ(lease(c, room + 1).body["chunks"].size(), room);
  EXPECT_EQ(share_stats(b)["orphaned_chunks"], 1);
  // ...and gives way to a lease once nobody does.
  const std::vector<ipc::WirePlace> refs(2, ipc::WirePlace{chunk, 0});
  std::vector<ipc::WirePlace> all = refs;
  all.push_back({chunk, kBlock});
  all.push_back({chunk, kBlock});
  b.call(ipc::op::kKvUnref, ipc::make_kv_places_args(all));
  EXPECT_EQ(lease(c, 1).body["chunks"].size(), 1u);
  s = stats(b);
  EXPECT_EQ(s["kv_share"]["orphaned_chunks"], 0);
  EXPECT_EQ(s["kv_share"]["blocks"], 0);
  EXPECT_EQ(s["kv_share"]["evicted_chunks_total"], 1);
  EXPECT_TRUE(
      places_found(b.call(ipc::op::kKvLookup, ipc::make_kv_lookup_args(chain.lookup()))).empty());
}

// A worker that shrinks its pool returns chunks it published into: they stay, the server's, and
// count in the budget as the server's, not the worker's.
TEST_F(KvShareTest, AReturnedChunkWithPublishedBlocksStaysFindable) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  ipc::Client a = connect(server.socket());
  ipc::Client b = connect(server.socket());
  const std::vector<uint64_t> ids = lease(a, 2).body["chunks"].get<std::vector<uint64_t>>();
  ASSERT_EQ(ids.size(), 2u);
  Chain chain(1, rng_);
  a.call(ipc::op::kKvPublish, ipc::make_kv_publish_args(chain.publish(ids[0], 1)));
  EXPECT_EQ(a.call(ipc::op::kKvReturn, ipc::make_kv_return_args(ids)).body["returned"], 2);
  const json s = stats(a);
  EXPECT_EQ(s["kv_chunks"], 1);
  EXPECT_EQ(s["kv_share"]["orphaned_chunks"], 1);
  EXPECT_EQ(s["memory"]["kv_bytes"], kChunk);
  for (const json& worker : s["workers"]) EXPECT_EQ(worker["kv"]["bytes"], 0) << worker.dump();
  // A no longer owns it: it cannot publish there or take its block back.
  EXPECT_THROW(a.call(ipc::op::kKvPublish, ipc::make_kv_publish_args(chain.publish(ids[0], 1))),
               ipc::ProtocolError);
  const std::vector<ipc::WirePlace> place{{ids[0], 0}};
  EXPECT_THROW(a.call(ipc::op::kKvWithdraw, ipc::make_kv_places_args(place)), ipc::ProtocolError);
  ipc::Frame found = b.call(ipc::op::kKvLookup, ipc::make_kv_lookup_args(chain.lookup()));
  EXPECT_EQ(places_found(found).size(), 1u);
  EXPECT_EQ(found.fds.size(), 1u);
}

TEST_F(KvShareTest, HostileSharingMessagesAreRefusedAndChangeNothing) {
  test::InProcessServer server({}, model_dir_.path(), nullptr, 64 * kMiB, 0.5);
  ipc::Client a = connect(server.socket());
  ipc::Client other = connect(server.socket());
  const uint64_t mine = lease(a, 1).body["chunks"][0].get<uint64_t>();
  const uint64_t theirs = lease(other, 1).body["chunks"][0].get<uint64_t>();
  Chain chain(2, rng_);
  ASSERT_EQ(other.call(ipc::op::kKvPublish, ipc::make_kv_publish_args(chain.publish(theirs, 1)))
                .body["published"],
            1);
  auto publish_at = [&](uint64_t chunk, uint64_t offset) {
    ipc::KvPublishRequest r = chain.publish(mine, 2);
    r.blocks[1].place = {chunk, offset};
    return ipc::make_kv_publish_args(r);
  };
  auto with_field = [](json args, const char* key, const char* value) {
    args[key] = value;
    return args;
  };
  struct Case {
    std::string_view op;
    json args;
    ErrorCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {ipc::op::kKvPublish, publish_at(theirs, kBlock), ErrorCode::kNotFound,
       "no KV chunk " + std::to_string(theirs)},
      {ipc::op::kKvPublish, publish_at(uint64_t(1) << 60, 0), ErrorCode::kNotFound, "no KV chunk"},
      {ipc::op::kKvPublish, publish_at(mine, kBlock + 1), ErrorCode::kBadRequest, "whole block"},
      {ipc::op::kKvPublish, publish_at(mine, kChunk), ErrorCode::kBadRequest, "whole block"},
      {ipc::op::kKvPublish, publish_at(mine, ~uint64_t(0) - kBlock + 1), ErrorCode::kBadRequest,
       "whole block"},
      {ipc::op::kKvPublish, publish_at(mine, 0), ErrorCode::kBadRequest, "repeated"},
      {ipc::op::kKvPublish, {{"domain", {1, 2}}}, ErrorCode::kBadRequest, "block_bytes"},
      {ipc::op::kKvLookup, {{"domain", {1}}}, ErrorCode::kBadRequest, "domain"},
      // Packed fields: tokens that are not whole int32s, keys short of the blocks, a place list
      // that is not base64.
      {ipc::op::kKvLookup, with_field(ipc::make_kv_lookup_args(chain.lookup()), "tokens", "AAA="),
       ErrorCode::kBadRequest, "tokens"},
      {ipc::op::kKvPublish,
       with_field(publish_at(mine, kBlock), "keys", "AAAAAAAAAAAAAAAAAAAAAA=="),
       ErrorCode::kBadRequest, "keys"},
      {ipc::op::kKvUnref, json{{"places", "not base64!"}}, ErrorCode::kBadRequest, "places"},
      {ipc::op::kKvUnref, ipc::make_kv_places_args(std::vector<ipc::WirePlace>{{theirs, 0}}),
       ErrorCode::kNotFound, "references"},
      {ipc::op::kKvWithdraw, ipc::make_kv_places_args(std::vector<ipc::WirePlace>{{theirs, 0}}),
       ErrorCode::kNotFound, "no KV chunk " + std::to_string(theirs)},
      {ipc::op::kKvWithdraw,
       ipc::make_kv_places_args(std::vector<ipc::WirePlace>{{mine, 0}, {mine, 0}}),
       ErrorCode::kBadRequest, "repeated"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.op) + " " + c.args.dump().substr(0, 300));
    try {
      a.call(c.op, c.args);
      ADD_FAILURE() << "accepted";
    } catch (const ipc::ProtocolError& e) {
      EXPECT_EQ(e.code(), c.code) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
  // Nothing moved: the other client's block is still the only one, still its own.
  EXPECT_EQ(share_stats(a)["blocks"], 1);
  json withdrawn = other
                       .call(ipc::op::kKvWithdraw,
                             ipc::make_kv_places_args(std::vector<ipc::WirePlace>{{theirs, 0}}))
                       .body;
  EXPECT_EQ(withdrawn["withdrawn"], json::array({0}));
  EXPECT_EQ(share_stats(a)["blocks"], 0);
}

}  // namespace
}  // namespace hearth
