// What the kernels of one step read besides the weights and the KV pool: the batch cut into
// sub-steps, and each sub-step's tokens, positions, KV slots, block tables and attention
// metadata, packed in pinned memory and copied to the device in one transfer.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda/cuda_memory_plan.h"

namespace hearth {

// One sub-step as the kernels see it: sizes known to the host.
struct StepShape {
  int tokens = 0, seqs = 0, rows = 0;  // rows: tokens whose logits are computed
  int max_kv_len = 0;
  int logits_row = 0;  // first row of the forward's logits this step writes
};

// Entries [first, last) of a batch, from token first_token of entry `first` to token last_token
// (exclusive) of entry `last - 1`.
struct SubStep {
  size_t first = 0, last = 0;
  int first_token = 0, last_token = 0;
};

// Cuts a batch into sub-steps of at most max_tokens tokens and max_seqs sequences, in order; an
// entry may straddle sub-steps (its later part sees the KV its earlier part wrote).
std::vector<SubStep> split_substeps(const ForwardBatch& batch, int max_tokens, int max_seqs);

class StepInputs {
 public:
  StepInputs(const StepLimits& limits, int block_size, DeviceArena& arena);

  // Starts a sub-step whose logits rows begin at `logits_row`; waits until the pinned copy of
  // the last one has reached the device.
  void begin(int logits_row);
  // Appends tokens [lo, hi) of `entry` as one sequence. Returns its row of the forward's logits
  // when it ends there wanting them, else -1.
  int add(const ForwardEntry& entry, int lo, int hi);
  // Appends a padding sequence: one token at position 0 of block 0 that writes no KV (slot -1);
  // its logits row is computed and never read.
  void add_padding();
  // Copies the sub-step to the device in `stream` order, only the block-table rows it uses.
  StepShape upload(cudaStream_t stream);

  // The device copies, for the kernels.
  const int32_t* tokens() const { return dev<int32_t>(layout_.tokens); }
  const int* pos() const { return dev<int>(layout_.pos); }
  const int* slot() const { return dev<int>(layout_.slot); }
  const int* query_start() const { return dev<int>(layout_.query_start); }
  const int* first_pos() const { return dev<int>(layout_.first_pos); }
  const int32_t* rows() const { return dev<int32_t>(layout_.rows); }
  const int* block_table() const { return dev<int>(layout_.block_table); }
  int max_blocks() const { return max_blocks_; }

 private:
  // Where each array lives, the same offsets in pinned and device memory; the block table last.
  struct Layout {
    size_t tokens, pos, slot, query_start, first_pos, rows, block_table, bytes;
  };
  template <typename T>
  T* host(size_t offset) const {
    return reinterpret_cast<T*>(host_.get<char>() + offset);
  }
  template <typename T>
  T* dev(size_t offset) const {
    return reinterpret_cast<T*>(dev_.get<char>() + offset);
  }
  // The next sequence's block-table row, `used` entries from `blocks`, zeros after.
  void set_table_row(int seq, const int32_t* blocks, size_t used);

  int block_size_, max_blocks_;
  Layout layout_{};
  DeviceBuffer dev_;
  PinnedBuffer host_;
  CudaEvent copied_;  // the pinned copy may be rewritten once this has passed
  StepShape shape_;
};

}  // namespace hearth
