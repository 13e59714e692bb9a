#include "worker/engine/kv_block_pool.h"

#include <stdexcept>
#include <string>

namespace hearth {

KvBlockPool::KvBlockPool(int num_blocks, bool growable) {
  if (num_blocks < 0 || (num_blocks == 0 && !growable))
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

void KvBlockPool::grow(int n) {
  if (n < 0) throw std::logic_error("a KV pool cannot grow by " + std::to_string(n));
  const int32_t first = total();
  refs_.resize(size_t(first) + n, 0);
  prev_.resize(refs_.size(), kNone);
  next_.resize(refs_.size(), kNone);
  // Pushed to the front in reverse, so the queue starts first, first + 1, ...
  for (int32_t b = first + n - 1; b >= first; --b) {
    prev_[b] = kNone;
    next_[b] = head_;
    if (head_ != kNone)
      prev_[head_] = b;
    else
      tail_ = b;
    head_ = b;
    ++free_count_;
  }
}

bool KvBlockPool::shrink(int n) {
  if (n < 0 || n > total()) return false;
  for (int32_t b = n; b < total(); ++b)
    if (refs_[b] != 0) return false;
  for (int32_t b = n; b < total(); ++b) unlink_free(b);
  refs_.resize(n);
  prev_.resize(n);
  next_.resize(n);
  return true;
}

int KvBlockPool::ref_count(int32_t block) const {
  check(block);
  return refs_[block];
}

}  // namespace hearth
