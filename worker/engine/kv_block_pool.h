// The bookkeeping of the paged KV pool: which of its fixed-size blocks are free, and how many
// owners each used block has. The memory itself belongs to the backend; a block id names the
// same slot in every layer's keys and values.
//
// Free blocks wait in a queue: allocation takes from the front, release appends to the back.
// Prefix caching (prefix_cache.h) keeps the contents of released blocks findable by hash; the
// queue order makes the least recently released block the first to be reused (evicted), and a
// cache hit takes a block out of the middle of the queue (reuse()), which is why it is an
// intrusive doubly linked list (O(1) everywhere) rather than a stack. Ref counts let two sequences
// share one block. Nothing here allocates after construction, and running out is an answer, not an
// error.
#pragma once

#include <cstdint>
#include <vector>

namespace hearth {

class KvBlockPool {
 public:
  // `growable`: a pool that grows later (grow()) may start empty.
  explicit KvBlockPool(int num_blocks, bool growable = false);

  int total() const { return int(refs_.size()); }
  int free() const { return free_count_; }
  int used() const { return total() - free_count_; }

  // Appends `n` blocks, each with one reference, to `out`; returns false and takes nothing
  // when fewer than `n` are free.
  bool allocate(int n, std::vector<int32_t>& out);

  // Adds an owner to a used block.
  void retain(int32_t block);
  // Adds an owner to a block, used or free; a free block leaves the free queue wherever it is
  // in it (a prefix-cache hit on a block nobody holds).
  void reuse(int32_t block);
  // Drops one owner; the last one returns the block to the back of the free queue.
  void release(int32_t block);

  int ref_count(int32_t block) const;

  // Adds blocks [total(), total() + n), free, at the front of the free queue: fresh memory is
  // taken before cached blocks are evicted.
  void grow(int n);
  // Drops blocks [n, total()) when every one of them is free; false, changing nothing, when one
  // is used.
  bool shrink(int n);

 private:
  void check(int32_t block) const;
  void push_back_free(int32_t block);
  int32_t pop_front_free();
  void unlink_free(int32_t block);

  static constexpr int32_t kNone = -1;
  std::vector<int32_t> refs_;
  std::vector<int32_t> prev_, next_;  // the free queue's links; kNone at its ends
  int32_t head_ = kNone, tail_ = kNone;
  int free_count_ = 0;
};

}  // namespace hearth
