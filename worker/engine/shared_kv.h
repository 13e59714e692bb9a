// Prefix KV blocks shared with other workers of the same cache domain (issue 22 item 3), as the
// engine sees them: block ids in the same address space as its own pool, no sockets (the
// provider lives in worker/: LeasedKvMemory). Foreign blocks have ids from first_foreign_block()
// on; the engine reads them and never writes them, and gives each one it found back
// (release) when no sequence holds it any more. The engine reaches it through
// KvMemory::shared(); KvCacheManager finds, releases, publishes and withdraws.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/engine/prefix_cache.h"

namespace hearth {

// One full block of a chain: its key and token ids (its parent is the previous link's key, or
// the chain's root).
struct SharedKvLink {
  BlockKey key;
  std::span<const int32_t> tokens;
};

// One of this worker's own full blocks, to publish once the step that filled it succeeded.
struct SharedKvBlock {
  int32_t block = 0;
  BlockKey key, parent;
  std::span<const int32_t> tokens;
};

class SharedKv {
 public:
  virtual ~SharedKv() = default;
  // Foreign block ids are [first_foreign_block(), first_foreign_block() + foreign_capacity()).
  virtual int first_foreign_block() const = 0;
  virtual int foreign_capacity() const = 0;
  // The engine's cache domain (cache_domain.h), known only once the engine exists (after the
  // memory): every find and publish after this call is made in it. Chains are rooted in the
  // domain already; the provider's own check is a second line.
  virtual void set_domain(const BlockKey& domain) = 0;
  // The blocks that continue `chain` from `root` (the longest published run), each foreign one
  // held until release(). A block this worker published itself comes back as its own id
  // (< first_foreign_block(), nothing to release). Throws std::runtime_error when the provider
  // is gone or lies.
  virtual std::vector<int32_t> find(const BlockKey& root, std::span<const SharedKvLink> chain) = 0;
  // Tensor parallel (RankedKvMemory): find() for a rank past the first, whose blocks must have
  // the ids rank 0's find() gave them (`ids`, one per link of `chain`), since one block table
  // addresses every rank's pool. A chunk this provider has not mapped yet goes where that makes
  // it so; the run stops at the first block that cannot have its id here (not published for
  // this rank, or published at another place). Returns the ids found: a prefix of `ids`.
  virtual std::vector<int32_t> find_at(const BlockKey& root, std::span<const SharedKvLink> chain,
                                       std::span<const int32_t> ids) = 0;
  // Gives foreign blocks back, once per find() that returned them.
  virtual void release(std::span<const int32_t> foreign) = 0;
  // Publishes own full blocks; returns how many the provider took (a prefix another worker
  // published first is not taken).
  virtual uint64_t publish(std::span<const SharedKvBlock> blocks) = 0;
  // Before own blocks are written again: those of `own` now free to write (not published, or
  // unpublished now); the rest are still read by other workers.
  virtual std::vector<int32_t> withdraw(std::span<const int32_t> own) = 0;
};

}  // namespace hearth
