// Where a backend's paged KV pool lives when the backend does not own it: one reserved address
// range that a provider (in served mode, the worker's lease from hearth-server) fills with
// chunks of whole blocks as the engine asks, and empties again. Block b always sits at
// base() + b * block_bytes(), so growing never moves a block and block ids stay indexes.
// The engine asks for growth while requests wait and gives idle chunks back; it never reaches
// the provider's sockets (layering: the provider lives in worker/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "worker/engine/shared_kv.h"

namespace hearth {

class KvMemory {
 public:
  virtual ~KvMemory() = default;

  // The start of the reserved range; blocks [0, blocks()) are mapped and writable.
  virtual std::byte* base() const = 0;
  virtual int64_t block_bytes() const = 0;
  virtual int blocks() const = 0;
  // The most blocks the range can ever hold (its reservation).
  virtual int max_blocks() const = 0;
  // Blocks one chunk holds: the unit of growing and shrinking.
  virtual int blocks_per_chunk() const = 0;

  // Asks for at least `blocks` more blocks (whole chunks, up to max_blocks()); returns how many
  // came, 0 when the provider has none to give now (the engine's requests then wait). Throws
  // std::runtime_error when the provider is gone.
  virtual int grow(int blocks) = 0;
  // Gives back every chunk past the first `keep` blocks (rounded up to whole chunks); none of
  // their blocks may be in use. Returns blocks() after.
  virtual int shrink(int keep) = 0;
  // Called when requests wait for memory and nothing can run: blocks a little, so that an
  // engine driven in a loop does not spin while another worker frees memory.
  virtual void wait_for_memory() {}

  // Prefix KV shared with other workers of the same cache domain (shared_kv.h): blocks they
  // computed, readable at ids past max_blocks(); null when this memory does not share.
  virtual SharedKv* shared() { return nullptr; }

  // For stats: chunks and bytes held now.
  virtual int chunks() const = 0;
  virtual uint64_t bytes() const = 0;

  // Tensor parallel (issue 26): one pool per rank, each holding its rank's KV heads of every
  // block and leased from its rank's device, grown and shrunk together (ranked_kv_memory.h).
  // A memory of one rank is its own rank 0.
  virtual int ranks() const { return 1; }
  virtual KvMemory& rank(int r) {
    if (r != 0) throw std::out_of_range("a KV memory of one rank has no rank " + std::to_string(r));
    return *this;
  }
};

// Served mode: makes the memory a leased pool lives in from its blocks' size, the most blocks it
// may ever hold, the fewest it needs (one context), and the tensor-parallel rank whose KV heads
// it holds (0 without tensor parallelism): rank r's pool is leased from rank r's device.
using KvMemoryFactory = std::function<std::shared_ptr<KvMemory>(int64_t block_bytes, int max_blocks,
                                                                int min_blocks, int rank)>;

}  // namespace hearth
