// Served mode, the worker's side of prefix KV sharing across workers (issue 22 item 3): it
// publishes full blocks of its own leased pool, finds blocks other workers published under the
// same hash chain, maps their chunks read-only (a worker never writes a block it did not
// allocate) and holds one server-side reference per block found until it drops it. The engine
// calls it through LeasedKvMemory (its SharedKv) on a local prefix-cache miss (lookup) and after
// a step succeeded (publish).
//
// Foreign chunks are mapped read-only (KvChunkRange::map_read_only, from the read-only
// descriptor the server passes) into a range of their own, a chunk a slot (the lowest free one,
// or one the caller picks), and only while this worker holds a reference to a block in them:
// the last unref unmaps the chunk. A mapping keeps a chunk's memory alive (a memfd's pages, a
// VMM allocation) after the server lets it go, and the server evicts any orphaned chunk nobody
// references, so a mapping kept past its references would make that eviction free nothing;
// it would also keep its slot from a chunk found later.
// On the GPU the same shape holds with a VMM range; this class is the CPU backend's (memfd).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "ipc/client.h"
#include "ipc/kv_share_protocol.h"
#include "weight-server/sharing/kv_chunk.h"

namespace hearth {

class SharedKvBlocks {
 public:
  // A block another worker (or this one) published: where it is, and its bytes in this
  // process (read-only).
  struct Found {
    ipc::WirePlace place;
    const std::byte* data = nullptr;
  };

  // `domain`: the engine's cache domain key; `max_chunks`: the most foreign chunks ever mapped.
  // `server` is the worker's connection; nothing else may use it at the same time.
  SharedKvBlocks(std::shared_ptr<ipc::Client> server, ipc::WireKey domain, int64_t block_bytes,
                 int max_chunks);
  // The same, mapping foreign chunks into `range` from `first_offset` on (room for
  // `max_chunks`), a range that outlives this object: a leased pool's, so that foreign blocks
  // are block ids of the pool's address space.
  SharedKvBlocks(std::shared_ptr<ipc::Client> server, ipc::WireKey domain, int64_t block_bytes,
                 int max_chunks, KvChunkRange& range, uint64_t first_offset);
  // A lookup names at most this many mapped chunks to the server, the most recently used (the
  // protocol's cap): a chunk left out that the run hits again comes with a descriptor, which is
  // closed unused, since the chunk is mapped already.
  static constexpr size_t kMappedNamedAtMost = ipc::kMaxKvShareBlocks;
  ~SharedKvBlocks();
  SharedKvBlocks(const SharedKvBlocks&) = delete;
  SharedKvBlocks& operator=(const SharedKvBlocks&) = delete;

  // Publishes full blocks of this worker's own chunks (call only after the step that filled them
  // succeeded). Returns how many the server took (a duplicate key is not an error).
  uint64_t publish(std::span<const ipc::KvPublishBlock> blocks);
  // Where a chunk not mapped yet goes, asked with the place of its first block in the run and
  // that block's index there: a slot, kNextSlot (the lowest free one) or kNoSlot (none: the run
  // stops at that block). A tensor-parallel rank past the first picks the slot that gives each
  // block the id rank 0 gave it (LeasedKvMemory::find_at).
  static constexpr int kNextSlot = -1;
  static constexpr int kNoSlot = -2;
  using SlotChoice = std::function<int(const ipc::WirePlace& first, size_t index)>;

  // The longest published run of `chain` after `root`; each found block holds a reference until
  // unref(). Blocks in chunks `is_own` accepts (the caller's own pool) come back with no data:
  // they are not mapped again (the descriptors the server passes for them are closed), the
  // caller knows where they are. Throws ipc::IpcError or std::runtime_error
  // (a reply that is not what was asked, a chunk that is not a sealed memfd of its size, a
  // mapping that fails), holding no reference of that lookup then.
  std::vector<Found> lookup(const ipc::WireKey& root, std::span<const ipc::KvLookupLink> chain,
                            const std::function<bool(uint64_t chunk)>& is_own = {},
                            const SlotChoice& choose = {});
  // Drops one reference per place (as many as lookups returned it); a foreign chunk left with
  // none is unmapped. Call it only once nothing reads those blocks any more (on the GPU: after
  // the step that read them finished).
  void unref(std::span<const ipc::WirePlace> places);
  // Asks to write own published blocks again; returns the indexes of `places` now free to write.
  std::vector<size_t> withdraw(std::span<const ipc::WirePlace> places);

  // The cache domain of every later publish and lookup (the engine's, known after this exists).
  void set_domain(const ipc::WireKey& domain) { domain_ = domain; }

  // The mapped chunks the next lookup names: all, or the most recently used
  // kMappedNamedAtMost.
  std::vector<uint64_t> mapped_to_name() const;
  // For tests: name at most `n` mapped chunks in a lookup instead of kMappedNamedAtMost.
  void set_mapped_named_at_most(size_t n) { mapped_named_at_most_ = n; }

  uint64_t references() const { return references_; }
  int mapped_chunks() const { return int(slots_.size()); }
  // Lookups asked of the server, foreign chunks mapped so far (a chunk still mapped is named
  // in later lookups and not mapped again) and unmapped so far (their last reference went).
  uint64_t lookups() const { return lookups_; }
  uint64_t chunk_maps() const { return chunk_maps_; }
  uint64_t chunk_unmaps() const { return chunk_unmaps_; }

 private:
  std::shared_ptr<ipc::Client> server_;
  ipc::WireKey domain_;
  int64_t block_bytes_;
  int max_chunks_;
  uint64_t chunk_bytes_;  // kv_chunk_bytes_for(block_bytes): every worker's chunk size
  std::unique_ptr<KvChunkRange> own_range_;  // when no range was given
  KvChunkRange* range_;                      // max_chunks slots from first_offset_, read-only
  uint64_t first_offset_ = 0;
  // The lowest slot no chunk holds, or kNoSlot when all are taken.
  int free_slot() const;
  // Unmaps each of `chunks` that is mapped here and holds none of this worker's references.
  void unmap_unreferenced(const std::vector<uint64_t>& chunks);

  struct Mapped {
    int slot = 0;           // in range_
    uint64_t last_use = 0;  // the lookup that last found a block in it
  };
  std::map<uint64_t, Mapped> slots_;  // foreign chunk id -> where it is mapped
  size_t mapped_named_at_most_ = kMappedNamedAtMost;
  std::vector<bool> slot_taken_;                            // max_chunks_ of them
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> held_;  // place -> references held
  uint64_t references_ = 0;
  uint64_t lookups_ = 0, chunk_maps_ = 0, chunk_unmaps_ = 0;
};

}  // namespace hearth
