// The batched CUDA backend's device memory: how large one step may be, the allocations it counts
// as its workspace, and the paged KV pool, sized last by the engine's one KV policy
// (resolve_kv_pool) from what the GPU has free once everything else is allocated.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/device_buffer.h"
#include "weight-server/model/model_config.h"
#include "worker/engine/backend.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/kv_memory.h"

namespace hearth {

// Tokens one sub-step holds at most: the activations grow with it (~100 KB per token on 8B).
inline constexpr int kMaxStepTokens = 8192;

// The sizes every buffer of a step follows.
struct StepLimits {
  int max_tokens = 0;     // tokens per sub-step
  int max_seqs = 0;       // sequences per forward
  int max_step_seqs = 0;  // sequences per sub-step: min(max_tokens, max_seqs)
  int max_blocks = 0;     // block-table row length: one full context

  static StepLimits of(const EngineOptions& options, int context_length);
};

// Device allocations that count towards the backend's workspace_bytes().
class DeviceArena {
 public:
  DeviceBuffer alloc(size_t bytes) {
    bytes_ += bytes;
    return DeviceBuffer(bytes);
  }
  void count(size_t bytes) { bytes_ += bytes; }  // memory allocated elsewhere (a regrowth)
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

// Bytes one token position takes in the pool (keys and values of every layer, 16-bit; with
// kv_cache_dtype fp8_e4m3 one e4m3 code per value and an fp32 scale per KV head).
int64_t cuda_kv_bytes_per_token(const ModelConfig& config,
                                KvCacheDtype kv_dtype = KvCacheDtype::Auto);

// The paged KV pool, block-major: block b is one run of block_bytes() holding, per layer, the
// layer's keys [n_kv_heads][block_size][head_dim] then its values, 16-bit (fp8 KV: each of the
// two is the codes, then their fp32 scales [n_kv_heads][block_size]). A layer's block
// address is base + b * block_bytes() + layer offset, so whole blocks are whole units of memory
// (what a leased chunk holds) and the kernels step from block to block by block_stride().
// Single-process, the pool is one allocation; served, it is the worker's leased range (VMM
// chunks mapped into one reservation that never moves, so captured graphs stay valid as chunks
// come and go), holding blocks [0, memory->blocks()); other workers' chunks, mapped read-only
// into the same reservation past the pool's own, hold the foreign blocks.
class CudaKvPool {
 public:
  // Own pool: sized by resolve_kv_pool from the memory free now, so it must be allocated last.
  // Zeroed once on `stream`: padding rows of decode graphs read block 0 and must see finite
  // values. With `lease`, the pool is the memory it makes, up to max_running contexts (or the
  // explicit kv_pool_tokens / kv_pool_gb), at least one context; `rank` is the tensor-parallel
  // rank whose heads `config` holds (its lease comes from that rank's device).
  CudaKvPool(const ModelConfig& config, const EngineOptions& options, int context_length,
             cudaStream_t stream, DeviceArena& arena, const KvMemoryFactory& lease = nullptr,
             int rank = 0);

  // Leased, blocks [0, memory->blocks()), and other workers' blocks (shared prefix KV) at ids
  // from memory->shared()->first_foreign_block() on.
  KvPoolShape shape() const;
  // True when other workers' blocks may be in this pool's block tables.
  bool shares() const { return memory_ && memory_->shared(); }
  KvMemory* memory() const { return memory_.get(); }
  // Before a step: a leased block 0 freshly mapped is zeroed (see the constructor).
  void prepare(cudaStream_t stream);
  size_t bytes() const {
    return memory_ ? size_t(memory_->bytes()) : size_t(shape_.num_blocks) * block_bytes_;
  }
  size_t block_bytes() const { return block_bytes_; }
  // Every block id a table may hold is below this: own blocks up to the reservation's size and
  // foreign ones past it (the range never moves, so captured kernels may rely on it).
  int64_t addressable_blocks() const;
  // Block 0 of a layer's keys / values; block b is block_stride() values (16-bit, or fp8
  // codes) further.
  void* k(int layer) const { return base_ + size_t(layer) * 2 * part_bytes_; }
  void* v(int layer) const { return static_cast<char*>(k(layer)) + part_bytes_; }
  int64_t block_stride() const { return int64_t(fp8_ ? block_bytes_ : block_bytes_ / 2); }
  bool fp8() const { return fp8_; }
  // fp8: bytes from a part's codes to its scales (PagedKvWriteArgs::kv_scale_offset).
  int64_t scale_offset() const { return scale_offset_; }

 private:
  KvPoolShape shape_{};
  size_t part_bytes_ = 0;   // one layer's keys (or values) of one block
  size_t block_bytes_ = 0;  // every layer's keys and values of one block
  bool fp8_ = false;
  int64_t scale_offset_ = 0;
  DeviceBuffer pool_;                 // own pool
  std::shared_ptr<KvMemory> memory_;  // leased pool
  char* base_ = nullptr;
  bool block0_zeroed_ = false;
};

}  // namespace hearth
