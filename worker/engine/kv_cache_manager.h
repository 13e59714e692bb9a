// Which KV blocks each sequence holds: its block table, grown as the sequence grows and freed
// all at once when it finishes, is cancelled or is preempted. Position p of a sequence lives in
// block_table[p / block_size] at offset p % block_size.
//
// With prefix caching on, every full block a sequence computes is registered in a PrefixCache
// (prefix_cache.h) and stays findable after its owners release it: it waits in the pool's free
// queue, least recently released first, and is evicted (its entry dropped) only when allocation
// takes it for something else. So a full pool evicts cached blocks before anyone has to wait.
// A sequence finds the cached blocks that continue its computed prefix and holds them like its
// own; nobody writes to a full block once computed, so sharing needs no copy.
//
// Shared across workers (share(), issue 22 item 3): on a local miss the rest of a sequence's
// full blocks are looked up with the provider (shared_kv.h). Blocks other workers computed come
// back as foreign ids, held in the table like own blocks but never in the pool: freeing the
// sequence gives them back to the provider. Own full blocks are published, but only through
// publish_queued(), which the engine calls once the step that filled them succeeded. Before the
// pool hands a published block out for writing it is withdrawn; one another worker still reads
// stays out of the free queue (pinned) until a later withdraw succeeds.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "worker/engine/kv_block_pool.h"
#include "worker/engine/prefix_cache.h"
#include "worker/engine/shared_kv.h"

namespace hearth {

using SequenceId = uint64_t;
struct Sequence;

class KvCacheManager {
 public:
  // `growable`: the pool grows and shrinks later (grow(), shrink()) and may start empty.
  KvCacheManager(int num_blocks, int block_size, bool prefix_cache = false, bool growable = false);

  int block_size() const { return block_size_; }
  int blocks_for(int64_t tokens) const { return int((tokens + block_size_ - 1) / block_size_); }

  // Blocks `seq` would have to take to cover `tokens` positions (0 if it already does).
  int blocks_needed(SequenceId seq, int tokens) const;
  // Grows `seq`'s table to cover `tokens` positions, evicting the cached blocks it takes.
  // Returns false, changing nothing, when the pool lacks the blocks.
  bool allocate(SequenceId seq, int tokens);
  // Releases every block `seq` holds, newest first (a sequence's tail is the least worth
  // keeping for prefix reuse, so it should be the first reused).
  void free(SequenceId seq);

  std::span<const int32_t> block_table(SequenceId seq) const;
  const KvBlockPool& pool() const { return pool_; }

  bool prefix_caching() const { return prefix_cache_on_; }
  // Takes the longest run of cached blocks that continues `seq`'s computed tokens, in whole
  // blocks and never covering its last token (whose logits the next step needs), and advances
  // seq.computed past them. A partly computed last block is swapped for the cached full one.
  // Returns the tokens found (0 with caching off); `shared`, when given, gets those of them in
  // blocks other workers computed. `ask_shared` false: the local cache only.
  int reuse_cached_blocks(Sequence& seq, int* shared = nullptr, bool ask_shared = true);
  // The block a lookup for `seq` would try next; -1 when its next lookup cannot find anything
  // (caching off, or that block would hold its last token).
  int next_lookup_block(const Sequence& seq) const;
  // The chain key of `seq`'s block `block` (its tokens must be known), computed once.
  const BlockKey& block_key(Sequence& seq, int block);
  // Registers the blocks of `seq` that became full when positions [from, to) were computed.
  void cache_full_blocks(Sequence& seq, int from, int to);
  // Forgets every cached block nobody holds (they stay free); the rest stay cached.
  void drop_unused_cached_blocks();
  // Forgets every cached block; those held stay with their holders, unshared from now on.
  // Blocks queued for publishing are dropped (the step that filled them is not trusted).
  void forget_cached_blocks() {
    cache_.clear();
    to_publish_.clear();
  }

  // Shares full blocks with other workers through `shared` (null: not at all). Needs prefix
  // caching; call before any sequence exists.
  void share(SharedKv* shared);
  bool sharing() const { return shared_ != nullptr; }
  // Publishes the blocks cache_full_blocks() registered since the last call. Call only once
  // the step that filled them succeeded. A provider that fails is a miss for other workers,
  // never an error here.
  void publish_queued();
  uint64_t shared_published_blocks() const { return published_total_; }
  uint64_t shared_lookups() const { return lookups_; }  // lookups asked of the provider
  int pinned_blocks() const { return int(pinned_.size()); }

  // Adds `n` free blocks at the end of the pool.
  void grow(int n) { pool_.grow(n); }
  // Drops blocks [n, total()) when nobody holds any of them, evicting those cached first;
  // false, changing nothing, when one is held.
  bool shrink(int n);

  int cached_blocks() const { return cache_.size(); }  // held or not
  uint64_t evicted_blocks() const { return evicted_; }

 private:
  KvBlockPool pool_;
  int block_size_;
  bool prefix_cache_on_;
  PrefixCache cache_;
  uint64_t evicted_ = 0;
  std::unordered_map<SequenceId, std::vector<int32_t>> tables_;

  bool foreign(int32_t block) const {
    return shared_ != nullptr && block >= shared_->first_foreign_block();
  }
  // After `table` took new blocks from `first_new` on: withdraws the published ones, pins those
  // other workers still read and takes others instead. False, giving every new block back,
  // when the pool runs out.
  bool withdraw_new(std::vector<int32_t>& table, size_t first_new);
  // Asks again for the pinned blocks; those now free to write go back to the free queue.
  void unpin_withdrawn();
  // Gives the provider back foreign blocks; a provider that is gone took them back already.
  void release_foreign(std::span<const int32_t> blocks);

  struct QueuedBlock {
    int32_t block;
    BlockKey key, parent;
    std::vector<int32_t> tokens;
  };
  SharedKv* shared_ = nullptr;
  std::vector<QueuedBlock> to_publish_;
  std::unordered_set<int32_t> published_;  // own blocks that may be published
  std::vector<int32_t> pinned_;            // published, read by others, held out of the pool
  uint64_t published_total_ = 0;
  uint64_t lookups_ = 0;
};

}  // namespace hearth
