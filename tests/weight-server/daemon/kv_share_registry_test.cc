// The server's index of shared prefix KV blocks (issue 22 item 3), in one process: publish only
// into one's own chunk, lookups that walk a chain and match everything a key stands for,
// references per client, withdraw refused while others read, orphaned chunks kept for their
// blocks and evicted least recently used first once nobody references them.
#include "weight-server/daemon/kv_share_registry.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace hearth {
namespace {

using Publish = KvShareRegistry::Publish;
using Withdraw = KvShareRegistry::Withdraw;

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kChunk = 8 * kBlock;
constexpr KvShareKey kDomain{11, 12};
constexpr KvShareKey kRoot{21, 22};
constexpr uint64_t kA = 1, kB = 2, kC = 3;

// A chain of `n` blocks of random keys and tokens, as a worker would send it.
struct Chain {
  std::vector<KvShareKey> keys;
  std::vector<std::vector<int32_t>> tokens;

  Chain(int n, std::mt19937_64& rng) {
    for (int i = 0; i < n; ++i) {
      keys.push_back({rng(), rng()});
      std::vector<int32_t> t(16);
      for (int32_t& x : t) x = int32_t(rng() % 128000);
      tokens.push_back(t);
    }
  }
  KvShareBlock block(int i, KvShareKey domain = kDomain, KvShareKey root = kRoot) const {
    return {domain, kBlock, keys[i], i == 0 ? root : keys[i - 1], tokens[i]};
  }
  std::vector<KvShareLink> links() const {
    std::vector<KvShareLink> out;
    for (size_t i = 0; i < keys.size(); ++i) out.push_back({keys[i], tokens[i]});
    return out;
  }
};

class KvShareRegistryTest : public ::testing::Test {
 protected:
  std::mt19937_64 rng{std::random_device{}()};
  KvShareRegistry registry;

  // Publishes chain blocks [0, n) into `chunk` of `owner`, one per block slot.
  void publish_all(uint64_t owner, uint64_t chunk, const Chain& chain, int n) {
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(registry.publish(owner, {chunk, uint64_t(i) * kBlock}, chain.block(i)),
                Publish::kPublished);
  }
};

TEST_F(KvShareRegistryTest, AnotherClientFindsThePublishedPrefixAndHoldsReferences) {
  registry.add_chunk(kA, 7, kChunk);
  Chain chain(4, rng);
  publish_all(kA, 7, chain, 3);  // the fourth block was not filled (or its step failed)
  auto links = chain.links();
  std::vector<KvBlockPlace> hits = registry.lookup(kB, kDomain, kBlock, kRoot, links);
  ASSERT_EQ(hits.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(hits[i], (KvBlockPlace{7, i * kBlock}));
    EXPECT_EQ(registry.references_at(hits[i]), 1u);
  }
  EXPECT_EQ(registry.references_of(kB), 3u);
  EXPECT_EQ(registry.references_of(kA), 0u);
  EXPECT_TRUE(registry.unref(kB, hits));
  EXPECT_EQ(registry.references_of(kB), 0u);
}

TEST_F(KvShareRegistryTest, ALookupStopsAtTheFirstBlockThatDiffersInAnythingItsKeyStandsFor) {
  registry.add_chunk(kA, 1, kChunk);
  Chain chain(3, rng);
  publish_all(kA, 1, chain, 3);
  auto links = chain.links();
  // Another domain, another block size, another root (another cache_salt): nothing.
  EXPECT_TRUE(registry.lookup(kB, {99, 12}, kBlock, kRoot, links).empty());
  EXPECT_TRUE(registry.lookup(kB, kDomain, kBlock * 2, kRoot, links).empty());
  EXPECT_TRUE(registry.lookup(kB, kDomain, kBlock, {21, 23}, links).empty());
  // The same key with other tokens (a collision or a forgery) ends the run there.
  std::vector<int32_t> other = chain.tokens[1];
  other[5] ^= 1;
  links[1].tokens = other;
  EXPECT_EQ(registry.lookup(kB, kDomain, kBlock, kRoot, links).size(), 1u);
  // Links out of order: the second link's parent is not the first's key.
  auto swapped = chain.links();
  std::swap(swapped[1], swapped[2]);
  EXPECT_EQ(registry.lookup(kC, kDomain, kBlock, kRoot, swapped).size(), 1u);
  EXPECT_EQ(registry.references_of(kB), 1u);
  EXPECT_EQ(registry.references_of(kC), 1u);
}

TEST_F(KvShareRegistryTest, OnlyTheOwnerPublishesAtABlockAlignedFreePlaceInsideItsChunk) {
  registry.add_chunk(kA, 1, kChunk);
  registry.add_chunk(kB, 2, kChunk);
  Chain chain(3, rng);
  EXPECT_EQ(registry.publish(kB, {1, 0}, chain.block(0)), Publish::kNotOwner);
  EXPECT_EQ(registry.publish(kA, {3, 0}, chain.block(0)), Publish::kNotOwner);  // no such chunk
  EXPECT_EQ(registry.publish(kA, {1, kBlock / 2}, chain.block(0)), Publish::kBadPlace);
  EXPECT_EQ(registry.publish(kA, {1, kChunk}, chain.block(0)), Publish::kBadPlace);
  EXPECT_EQ(registry.publish(kA, {1, ~uint64_t(0) - kBlock + 1}, chain.block(0)),
            Publish::kBadPlace);
  KvShareBlock empty = chain.block(0);
  empty.block_bytes = 0;
  EXPECT_EQ(registry.publish(kA, {1, 0}, empty), Publish::kBadPlace);
  EXPECT_EQ(registry.publish(kA, {1, 0}, chain.block(0)), Publish::kPublished);
  EXPECT_EQ(registry.publish(kA, {1, 0}, chain.block(1)), Publish::kPlaceTaken);
  // The same prefix computed again elsewhere: the first stays the one found.
  EXPECT_EQ(registry.publish(kB, {2, 0}, chain.block(0)), Publish::kDuplicate);
  EXPECT_EQ(registry.blocks(), 1u);
}

TEST_F(KvShareRegistryTest, TheOwnerWithdrawsABlockOnlyWhileNobodyElseReadsIt) {
  registry.add_chunk(kA, 1, kChunk);
  Chain chain(2, rng);
  publish_all(kA, 1, chain, 2);
  auto links = chain.links();
  ASSERT_EQ(registry.lookup(kA, kDomain, kBlock, kRoot, links).size(), 2u);  // its own: fine
  ASSERT_EQ(registry.lookup(kB, kDomain, kBlock, kRoot, std::span(links).first(1)).size(), 1u);
  EXPECT_EQ(registry.withdraw(kB, {1, 0}), Withdraw::kNotFound);  // not B's chunk
  EXPECT_EQ(registry.withdraw(kA, {1, 0}), Withdraw::kReferenced);
  EXPECT_EQ(registry.withdraw(kA, {1, kBlock}), Withdraw::kWithdrawn);
  EXPECT_EQ(registry.withdraw(kA, {1, kBlock}), Withdraw::kNotFound);
  EXPECT_EQ(registry.references_of(kA), 1u);  // its reference on the withdrawn block went
  registry.forget(kB);
  EXPECT_EQ(registry.withdraw(kA, {1, 0}), Withdraw::kWithdrawn);
  EXPECT_EQ(registry.blocks(), 0u);
  EXPECT_EQ(registry.references_of(kA), 0u);
}

TEST_F(KvShareRegistryTest, AnUnrefOfReferencesNotHeldChangesNothing) {
  registry.add_chunk(kA, 1, kChunk);
  Chain chain(2, rng);
  publish_all(kA, 1, chain, 2);
  auto links = chain.links();
  auto hits = registry.lookup(kB, kDomain, kBlock, kRoot, links);
  ASSERT_EQ(hits.size(), 2u);
  std::vector<KvBlockPlace> twice{hits[0], hits[0]};
  EXPECT_FALSE(registry.unref(kB, twice));
  std::vector<KvBlockPlace> forged{hits[0], {1, 5 * kBlock}};
  EXPECT_FALSE(registry.unref(kB, forged));
  EXPECT_FALSE(registry.unref(kC, std::span(hits).first(1)));
  EXPECT_EQ(registry.references_of(kB), 2u);
  EXPECT_TRUE(registry.unref(kB, hits));
  EXPECT_FALSE(registry.unref(kB, hits));
}

TEST_F(KvShareRegistryTest, AReleasedChunkStaysForItsBlocksAndIsEvictedOnceUnreferenced) {
  registry.add_chunk(kA, 1, kChunk);
  registry.add_chunk(kA, 2, kChunk);
  Chain chain(2, rng);
  publish_all(kA, 1, chain, 2);
  EXPECT_TRUE(registry.release_chunk(2));  // nothing published in it: free now
  auto links = chain.links();
  auto hits = registry.lookup(kB, kDomain, kBlock, kRoot, links);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_FALSE(registry.release_chunk(1));  // A was killed: its chunk stays, orphaned
  EXPECT_EQ(registry.orphaned_chunks(), 1u);
  EXPECT_FALSE(registry.owner_of(1).has_value());
  // Still findable; nobody may publish into it or withdraw from it.
  EXPECT_EQ(registry.lookup(kC, kDomain, kBlock, kRoot, links).size(), 2u);
  EXPECT_EQ(registry.withdraw(kA, {1, 0}), Withdraw::kNotFound);
  Chain other(1, rng);
  EXPECT_EQ(registry.publish(kA, {1, 2 * kBlock}, other.block(0)), Publish::kNotOwner);
  EXPECT_TRUE(registry.evict(kChunk).empty());  // referenced
  registry.forget(kC);
  EXPECT_TRUE(registry.evict(kChunk).empty());  // B still reads it
  EXPECT_TRUE(registry.unref(kB, hits));
  EXPECT_EQ(registry.evict(kChunk), std::vector<uint64_t>{1});
  EXPECT_EQ(registry.blocks(), 0u);
  EXPECT_EQ(registry.orphaned_chunks(), 0u);
  EXPECT_TRUE(registry.lookup(kB, kDomain, kBlock, kRoot, links).empty());
}

TEST_F(KvShareRegistryTest, EvictionTakesTheLeastRecentlyUsedOrphansFirstAndOnlyWhatIsAsked) {
  std::vector<Chain> chains;
  for (uint64_t c = 1; c <= 3; ++c) {
    registry.add_chunk(kA, c, kChunk);
    chains.emplace_back(1, rng);
    publish_all(kA, c, chains.back(), 1);
  }
  // Use chunk 1's block after the others: 2 is now the least recently used, then 3.
  auto links = chains[0].links();
  auto hits = registry.lookup(kB, kDomain, kBlock, kRoot, links);
  ASSERT_TRUE(registry.unref(kB, hits));
  for (uint64_t c = 1; c <= 3; ++c) EXPECT_FALSE(registry.release_chunk(c));
  EXPECT_EQ(registry.evict(1), std::vector<uint64_t>{2});  // at least one chunk
  EXPECT_EQ(registry.evict(2 * kChunk), (std::vector<uint64_t>{3, 1}));
  EXPECT_TRUE(registry.evict(kChunk).empty());
}

// A tensor-parallel worker's ranks publish in chunks of several devices: memory asked on one
// device evicts only that device's orphans, here the odd chunks.
TEST_F(KvShareRegistryTest, EvictionTakesOnlyTheChunksItIsAllowed) {
  std::vector<Chain> chains;
  for (uint64_t c = 1; c <= 4; ++c) {
    registry.add_chunk(kA, c, kChunk);
    chains.emplace_back(1, rng);
    publish_all(kA, c, chains.back(), 1);
    EXPECT_FALSE(registry.release_chunk(c));
  }
  const auto odd = [](uint64_t chunk) { return chunk % 2 == 1; };
  EXPECT_EQ(registry.evict(4 * kChunk, odd), (std::vector<uint64_t>{1, 3}));
  EXPECT_TRUE(registry.evict(kChunk, odd).empty());
  EXPECT_EQ(registry.orphaned_chunks(), 2u);
  EXPECT_EQ(registry.evict(4 * kChunk), (std::vector<uint64_t>{2, 4}));
}

TEST_F(KvShareRegistryTest, AChunkStillOwnedIsNeverEvicted) {
  registry.add_chunk(kA, 1, kChunk);
  Chain chain(1, rng);
  publish_all(kA, 1, chain, 1);
  EXPECT_TRUE(registry.evict(kChunk).empty());
  EXPECT_EQ(registry.blocks(), 1u);
  EXPECT_THROW(registry.add_chunk(kB, 1, kChunk), std::invalid_argument);
}

TEST_F(KvShareRegistryTest, AClientThatNeverDropsReferencesFindsNoMoreAtItsLimit) {
  KvShareRegistry limited(3);
  limited.add_chunk(kA, 1, kChunk);
  Chain chain(2, rng);
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(limited.publish(kA, {1, uint64_t(i) * kBlock}, chain.block(i)), Publish::kPublished);
  auto links = chain.links();
  EXPECT_EQ(limited.lookup(kB, kDomain, kBlock, kRoot, links).size(), 2u);
  EXPECT_EQ(limited.lookup(kB, kDomain, kBlock, kRoot, links).size(), 1u);
  EXPECT_TRUE(limited.lookup(kB, kDomain, kBlock, kRoot, links).empty());
  EXPECT_EQ(limited.references_of(kB), 3u);
  EXPECT_EQ(limited.lookup(kC, kDomain, kBlock, kRoot, links).size(), 2u);  // others unaffected
  const std::vector<KvBlockPlace> first{{1, 0}};
  EXPECT_TRUE(limited.unref(kB, first));
  EXPECT_EQ(limited.lookup(kB, kDomain, kBlock, kRoot, links).size(), 1u);
}

}  // namespace
}  // namespace hearth
