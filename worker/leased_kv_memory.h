// Served mode: the worker's paged KV pool in chunks leased from hearth-server (issue 22). One
// address range is reserved for the most the pool may ever hold; each chunk the server passes
// (a sealed memfd on the CPU backend) is mapped at base + i * chunk_bytes in lease order, so
// block b stays at base + b * block_bytes. Chunks beyond the first ones go back when the engine
// shrinks, and all of them when the connection to the server closes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ipc/client.h"
#include "ipc/kv_share_protocol.h"
#include "weight-server/sharing/kv_chunk.h"
#include "worker/engine/kv_memory.h"
#include "worker/engine/shared_kv.h"
#include "worker/shared_kv_blocks.h"

namespace hearth {

// Prefix KV shared with other workers (issue 22 item 3): `chunks` slots past the pool's own
// range for other workers' chunks, mapped read-only; 0 turns sharing off. `domain` is the
// engine's cache domain key (the engine sets it again once it exists: SharedKv::set_domain).
struct LeasedKvSharing {
  BlockKey domain;
  int chunks = 0;
};

class LeasedKvMemory final : public KvMemory, public SharedKv {
 public:
  // Reserves room for `max_blocks` blocks of `block_bytes` and leases the chunks `min_blocks`
  // need (stated to the server as this worker's guaranteed minimum), or what the budget gives
  // now, maybe nothing. `server` is the worker's connection, shared with its weights' lease;
  // nothing else may use it at the same time. Throws ipc::IpcError (a refusal, a dead server)
  // or std::runtime_error (a chunk that is not what was leased).
  // `reserve` makes the range (default: memfd chunks in host memory; reserve_vmm_kv_range for
  // the GPU). `sharing` adds room for other workers' chunks after the pool's own. `device` is
  // the server's KV device the chunks come from: a tensor-parallel rank's own (issue 26).
  using Reserve = std::function<std::unique_ptr<KvChunkRange>(uint64_t bytes)>;
  LeasedKvMemory(std::shared_ptr<ipc::Client> server, int64_t block_bytes, int max_blocks,
                 int min_blocks, const Reserve& reserve = nullptr, LeasedKvSharing sharing = {},
                 int device = 0);
  ~LeasedKvMemory() override;
  LeasedKvMemory(const LeasedKvMemory&) = delete;
  LeasedKvMemory& operator=(const LeasedKvMemory&) = delete;

  std::byte* base() const override { return range_->base(); }
  int64_t block_bytes() const override { return block_bytes_; }
  int blocks() const override { return int(chunk_ids_.size()) * blocks_per_chunk_; }
  int max_blocks() const override { return max_chunks_ * blocks_per_chunk_; }
  int blocks_per_chunk() const override { return blocks_per_chunk_; }
  int grow(int blocks) override;
  int shrink(int keep) override;
  void wait_for_memory() override;
  int chunks() const override { return int(chunk_ids_.size()); }
  uint64_t bytes() const override { return chunk_ids_.size() * chunk_bytes_; }

  SharedKv* shared() override { return shared_ ? this : nullptr; }

  uint64_t chunk_bytes() const { return chunk_bytes_; }
  // Where block `block` (< blocks()) lives on the server: its chunk id and byte offset, the
  // place it is published under for other workers (shared_kv_blocks.h).
  ipc::WirePlace place_of_block(int block) const;

  // SharedKv: foreign blocks follow max_blocks(). With sharing off, nothing is ever found or
  // published and every own block is free to write.
  int first_foreign_block() const override { return max_blocks(); }
  int foreign_capacity() const override { return sharing_chunks_ * blocks_per_chunk_; }
  void set_domain(const BlockKey& domain) override;
  std::vector<int32_t> find(const BlockKey& root, std::span<const SharedKvLink> chain) override;
  std::vector<int32_t> find_at(const BlockKey& root, std::span<const SharedKvLink> chain,
                               std::span<const int32_t> ids) override;
  void release(std::span<const int32_t> foreign) override;
  uint64_t publish(std::span<const SharedKvBlock> blocks) override;
  std::vector<int32_t> withdraw(std::span<const int32_t> own) override;

 private:
  // Asks for `chunks` more and maps what comes; returns how many came.
  int lease(int chunks);
  // find() with `ids` (find_at), or anywhere when `ids` is empty.
  std::vector<int32_t> find_placed(const BlockKey& root, std::span<const SharedKvLink> chain,
                                   std::span<const int32_t> ids);
  // The own block id at `place`, or -1 when it is not in a chunk this pool holds.
  int32_t own_block_at(const ipc::WirePlace& place) const;

  std::shared_ptr<ipc::Client> server_;
  int64_t block_bytes_;
  uint64_t chunk_bytes_;
  int blocks_per_chunk_;
  int max_chunks_;
  int min_chunks_;
  int device_ = 0;
  std::unique_ptr<KvChunkRange> range_;               // max_chunks_ * chunk_bytes_ of address space
  std::vector<uint64_t> chunk_ids_;                   // chunk i of the range, in lease order
  std::unordered_map<uint64_t, size_t> chunk_index_;  // chunk id -> i
  int sharing_chunks_ = 0;
  std::unique_ptr<SharedKvBlocks> shared_;     // maps into range_ past max_chunks_
  std::map<int32_t, ipc::WirePlace> foreign_;  // foreign block id -> its place, once found
};

}  // namespace hearth
