#include "worker/engine/kv_block_pool.h"

#include <stdexcept>
#include <string>

namespace hearth {

KvBlockPool::KvBlockPool(int num_blocks) {
  if (num_blocks <= 0)
    throw std::runtime_error("the KV pool needs at least one block, got " +
                             std::to_string(num_blocks));
  refs_.assign(num_blocks, 0);
  prev_.assign(num_blocks, kNone);
  next_.assign(num_blocks, kNone);
  for (int32_t b = 0; b < num_blocks; ++b) push_back_free(b);
}

void KvBlockPool::check(int32_t block) const {
  if (block < 0 || block >= total())
    throw std::logic_error("KV block " + std::to_string(block) + " is outside the pool of " +
                           std::to_string(total()));
}

void KvBlockPool::push_back_free(int32_t block) {
  prev_[block] = tail_;
  next_[block] = kNone;
  if (tail_ != kNone)
    next_[tail_] = block;
  else
    head_ = block;
  tail_ = block;
  ++free_count_;
}

int32_t KvBlockPool::pop_front_free() {
  const int32_t block = head_;
  unlink_free(block);
  return block;
}

void KvBlockPool::unlink_free(int32_t block) {
  if (prev_[block] != kNone)
    next_[prev_[block]] = next_[block];
  else
    head_ = next_[block];
  if (next_[block] != kNone)
    prev_[next_[block]] = prev_[block];
  else
    tail_ = prev_[block];
  prev_[block] = next_[block] = kNone;
  --free_count_;
}

bool KvBlockPool::allocate(int n, std::vector<int32_t>& out) {
  if (n < 0 || n > free_count_) return false;
  for (int i = 0; i < n; ++i) {
    const int32_t block = pop_front_free();
    refs_[block] = 1;
    out.push_back(block);
  }
  return true;
}

void KvBlockPool::retain(int32_t block) {
  check(block);
  if (refs_[block] == 0)
    throw std::logic_error("KV block " + std::to_string(block) + " is free: nothing to share");
  ++refs_[block];
}

void KvBlockPool::reuse(int32_t block) {
  check(block);
  if (refs_[block]++ == 0) unlink_free(block);
}

void KvBlockPool::release(int32_t block) {
  check(block);
  if (refs_[block] == 0)
    throw std::logic_error("KV block " + std::to_string(block) + " released twice");
  if (--refs_[block] == 0) push_back_free(block);
}

int KvBlockPool::ref_count(int32_t block) const {
  check(block);
  return refs_[block];
}

}  // namespace hearth
