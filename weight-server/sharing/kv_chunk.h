// One chunk of a worker's paged KV pool, as the server creates and the worker maps it. A chunk
// is a fixed number of whole KV blocks (every layer's keys and values), 2 MiB-aligned, so a
// worker that maps chunk i at base + i * chunk_bytes keeps block b at base + b * block_bytes.
// On the CPU backend a chunk is a memfd sealed against growing and shrinking (the worker writes
// it; nobody can truncate it under a mapping); on the GPU it is a VMM allocation exported as a
// POSIX fd, as the weights are. A chunk is named by a server-wide id, so a block can later be
// named by (chunk id, offset) across workers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/unique_fd.h"

namespace hearth {

inline constexpr uint64_t kKvChunkAlignment = uint64_t(2) << 20;  // 2 MiB, the VMM granularity
inline constexpr uint64_t kMaxKvChunkBytes = uint64_t(1) << 30;   // 1 GiB

// Blocks of kKvChunkAlignment or more come at least this many to a chunk (fewer only where
// kMaxKvChunkBytes stops it): each chunk is its own allocation, mapped on its own by every
// worker that reads it, and one block per chunk made a 2,000-token prompt of an 8B model 125
// mappings (VMM import + map + access) in the first worker to read it.
inline constexpr uint64_t kMinKvChunkBlocks = 8;

// The smallest multiple of kKvChunkAlignment that holds a whole number of `block_bytes` blocks
// (their least common multiple), times the least factor that makes it hold kMinKvChunkBlocks
// blocks when the blocks are that large (a chunk of small blocks already holds several), within
// kMaxKvChunkBytes. Throws std::runtime_error when even the least common multiple passes
// kMaxKvChunkBytes (a block size with a large odd factor) or `block_bytes` is 0.
uint64_t kv_chunk_bytes_for(uint64_t block_bytes);

// The server's handle on one chunk: it keeps the memory while the chunk is leased, and hands
// each worker that maps it a descriptor of its own.
class KvChunkMemory {
 public:
  virtual ~KvChunkMemory() = default;
  // A new descriptor for the chunk, owned by the caller (to pass by SCM_RIGHTS).
  virtual UniqueFd export_fd() const = 0;
  // A descriptor for a worker that only reads the chunk (another worker's shared prefix
  // blocks): on the CPU backend the memfd reopened read-only, so no mapping of it can ever be
  // made writable. Default: export_fd() (VMM: the reader's mapping is the guard, see
  // KvChunkRange::map_read_only).
  virtual UniqueFd export_read_only_fd() const { return export_fd(); }
};

// The CPU backend's chunk: a memfd made by create_kv_chunk_memfd.
std::unique_ptr<KvChunkMemory> create_memfd_kv_chunk(uint64_t bytes, const std::string& name);

// The worker's side: one reserved address range that received chunks are mapped into, each at
// the offset the worker chooses; unmapping leaves the range reserved.
class KvChunkRange {
 public:
  virtual ~KvChunkRange() = default;
  virtual std::byte* base() const = 0;
  // Checks that `fd` is a chunk of `bytes` and maps it writable at base() + offset. Throws
  // std::runtime_error starting with `label`.
  virtual void map(uint64_t offset, int fd, uint64_t bytes, const std::string& label) = 0;
  // The same, read-only: another worker's chunk, whose shared prefix blocks this worker reads
  // and never writes (issue 22 item 3). The memfd range maps it PROT_READ (and its descriptor
  // is read-only too); the VMM range sets, and checks, read-only device access, the only guard
  // there (a VMM handle has no read-only kind). Throws std::runtime_error starting with `label`;
  // nothing stays mapped then.
  virtual void map_read_only(uint64_t offset, int fd, uint64_t bytes, const std::string& label);
  virtual void unmap(uint64_t offset, uint64_t bytes) = 0;
};

// The CPU backend's range: an mmap PROT_NONE reservation; chunks are memfds mapped MAP_FIXED
// over it.
std::unique_ptr<KvChunkRange> reserve_memfd_kv_range(uint64_t bytes);

// Server, CPU backend: a zeroed memfd of `bytes`, sealed against growing, shrinking and further
// seals, writable. Throws std::runtime_error.
UniqueFd create_kv_chunk_memfd(uint64_t bytes, const std::string& name);

// Worker, CPU backend: checks that `fd` is a memfd of exactly `bytes` that nobody can grow or
// shrink (a shrink under a mapping would kill the worker with SIGBUS). Throws
// std::runtime_error starting with `label`.
void check_kv_chunk_memfd(int fd, uint64_t bytes, const std::string& label);

}  // namespace hearth
