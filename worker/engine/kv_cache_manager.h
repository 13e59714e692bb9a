// Which KV blocks each sequence holds: its block table, grown as the sequence grows and freed
// all at once when it finishes, is cancelled or is preempted. Position p of a sequence lives in
// block_table[p / block_size] at offset p % block_size.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "worker/engine/kv_block_pool.h"

namespace hearth {

using SequenceId = uint64_t;

class KvCacheManager {
 public:
  KvCacheManager(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int blocks_for(int64_t tokens) const { return int((tokens + block_size_ - 1) / block_size_); }

  // Blocks `seq` would have to take to cover `tokens` positions (0 if it already does).
  int blocks_needed(SequenceId seq, int tokens) const;
  // Grows `seq`'s table to cover `tokens` positions. Returns false, changing nothing, when the
  // pool lacks the blocks.
  bool allocate(SequenceId seq, int tokens);
  // Releases every block `seq` holds, newest first (a sequence's tail is the least worth
  // keeping for prefix reuse, so it should be the first reused).
  void free(SequenceId seq);

  std::span<const int32_t> block_table(SequenceId seq) const;
  const KvBlockPool& pool() const { return pool_; }

 private:
  KvBlockPool pool_;
  int block_size_;
  std::unordered_map<SequenceId, std::vector<int32_t>> tables_;
};

}  // namespace hearth
