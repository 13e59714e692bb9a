// A tensor-parallel engine's KV memory (issue 26): one pool per rank, rank r's leased from rank
// r's device and holding its KV heads only, seen by the engine as one pool. Every rank holds the
// same block ids (one block table addresses them all), so they grow and shrink together: a grow
// keeps only the blocks every rank got, handing back what one rank got beyond the others (so a
// worker waiting for one device does not sit on another's memory), and blocks() is what all of
// them hold. The rank that gave the fewest is asked first next time.
//
// Prefix blocks are shared with other workers when every rank's pool shares (shared() is null
// otherwise): rank r publishes and finds its pieces of a block under keys of its own (rank_key:
// domain, root and every link), and a block found counts only where every rank found it at the same
// id, rank 0's (SharedKv::find_at), since one block table addresses every rank's pool. Two
// tensor-parallel workers computing one prefix at once may each win it on some rank; then the
// ranks disagree and the block is a miss, never another rank's bytes.
#pragma once

#include <memory>
#include <vector>

#include "worker/engine/kv_memory.h"

namespace hearth {

class RankedKvMemory final : public KvMemory, public SharedKv {
 public:
  // `ranks` in rank order, all with blocks of one size and one chunk size. Those holding more
  // blocks than the others at the start give the difference back. Throws std::invalid_argument.
  explicit RankedKvMemory(std::vector<std::shared_ptr<KvMemory>> ranks);

  // Rank 0's range; a backend reaches rank r's through rank(r).base().
  std::byte* base() const override { return ranks_[0]->base(); }
  int64_t block_bytes() const override { return ranks_[0]->block_bytes(); }
  int blocks() const override { return blocks_; }
  int max_blocks() const override;
  int blocks_per_chunk() const override { return ranks_[0]->blocks_per_chunk(); }
  int grow(int blocks) override;
  int shrink(int keep) override;
  void wait_for_memory() override { ranks_[0]->wait_for_memory(); }
  int chunks() const override;
  uint64_t bytes() const override;

  int ranks() const override { return int(ranks_.size()); }
  KvMemory& rank(int r) override { return *ranks_.at(size_t(r)); }

  SharedKv* shared() override { return shared_.empty() ? nullptr : this; }
  // SharedKv over every rank: rank 0's foreign ids, the room every rank has.
  int first_foreign_block() const override { return shared_[0]->first_foreign_block(); }
  int foreign_capacity() const override;
  void set_domain(const BlockKey& domain) override;
  std::vector<int32_t> find(const BlockKey& root, std::span<const SharedKvLink> chain) override;
  std::vector<int32_t> find_at(const BlockKey& root, std::span<const SharedKvLink> chain,
                               std::span<const int32_t> ids) override;
  void release(std::span<const int32_t> foreign) override;
  // What every rank took: the fewest any took.
  uint64_t publish(std::span<const SharedKvBlock> blocks) override;
  // Free to write on every rank; a block one rank still lends stays withdrawn on the others
  // and is asked again later (the engine keeps it pinned), which those answer at once.
  std::vector<int32_t> withdraw(std::span<const int32_t> own) override;

 private:
  // Every rank back to the fewest blocks any holds; returns that count.
  int align();

  // Asks ranks 1.. for rank 0's `ids` of `chain`; returns the run every rank found.
  std::vector<int32_t> found_on_every_rank(const BlockKey& root,
                                           std::span<const SharedKvLink> chain,
                                           std::vector<int32_t> ids);
  // Gives rank `rank` back the foreign blocks among `ids`.
  void give_back(size_t rank, std::span<const int32_t> ids);

  std::vector<std::shared_ptr<KvMemory>> ranks_;
  std::vector<SharedKv*> shared_;  // each rank's, or empty when one of them does not share
  int blocks_ = 0;
  size_t first_ = 0;  // the rank that gave the fewest blocks last: asked first
};

// What each of `ranks` rank pools leases through a KvMemoryFactory: its heads' share of a block
// of `block_size` positions (`kv_bytes_per_token` counts every head), at most `max_blocks`, at
// least one context of `context` positions. In-process ranks, a process group's leader and each
// of its followers all take it from here, so their blocks are the same size.
struct RankLease {
  int64_t block_bytes = 0;
  int max_blocks = 0;
  int min_blocks = 0;
};
RankLease rank_lease(int64_t kv_bytes_per_token, int ranks, int block_size, int max_blocks,
                     int context);

// Makes one pool per rank with `factory` (rank r's from its device, each `lease`) as a
// RankedKvMemory; with one rank, that rank's pool itself.
std::shared_ptr<KvMemory> make_ranked_kv_memory(const KvMemoryFactory& factory, int ranks,
                                                const RankLease& lease);

}  // namespace hearth
