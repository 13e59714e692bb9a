#include "worker/engine/ranked_kv_memory.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hearth {

RankedKvMemory::RankedKvMemory(std::vector<std::shared_ptr<KvMemory>> ranks)
    : ranks_(std::move(ranks)) {
  if (ranks_.empty()) throw std::invalid_argument("a ranked KV memory needs a rank");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!ranks_[r]) throw std::invalid_argument("rank " + std::to_string(r) + " has no KV memory");
    // Chunks of one size: a grow that gives each rank whole chunks keeps their blocks equal.
    if (ranks_[r]->block_bytes() != ranks_[0]->block_bytes() ||
        ranks_[r]->blocks_per_chunk() != ranks_[0]->blocks_per_chunk())
      throw std::invalid_argument(
          "rank " + std::to_string(r) +
          "'s KV memory has blocks or chunks of another size than rank 0's");
  }
  blocks_ = align();
}

int RankedKvMemory::max_blocks() const {
  int most = ranks_[0]->max_blocks();
  for (const auto& rank : ranks_) most = std::min(most, rank->max_blocks());
  return most;
}

int RankedKvMemory::align() {
  int fewest = ranks_[0]->blocks();
  for (const auto& rank : ranks_) fewest = std::min(fewest, rank->blocks());
  for (const auto& rank : ranks_)
    if (rank->blocks() > fewest) rank->shrink(fewest);
  return fewest;
}

int RankedKvMemory::grow(int blocks) {
  if (blocks <= 0) return 0;
  const int before = blocks_;
  try {
    // The rank that held back last time asks first, and each other asks for no more than the
    // ranks before it got: a full device costs one round trip, not a lease and a return of
    // chunks on every other device each time the engine asks.
    int target = before + blocks;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const size_t r = (first_ + i) % ranks_.size();
      KvMemory& rank = *ranks_[r];
      if (const int lacking = target - rank.blocks(); lacking > 0) rank.grow(lacking);
      if (rank.blocks() < target) {
        target = rank.blocks();
        first_ = r;
      }
      if (target <= before) break;
    }
  } catch (...) {
    // A provider gone: the ranks that grew give it back (best effort), the pool stays as it was.
    try {
      for (const auto& rank : ranks_)
        if (rank->blocks() > before) rank->shrink(before);
    } catch (...) {
    }
    throw;
  }
  blocks_ = align();
  return blocks_ - before;
}

int RankedKvMemory::shrink(int keep) {
  for (const auto& rank : ranks_) rank->shrink(keep);
  blocks_ = align();
  return blocks_;
}

int RankedKvMemory::chunks() const {
  int n = 0;
  for (const auto& rank : ranks_) n += rank->chunks();
  return n;
}

uint64_t RankedKvMemory::bytes() const {
  uint64_t n = 0;
  for (const auto& rank : ranks_) n += rank->bytes();
  return n;
}

RankLease rank_lease(int64_t kv_bytes_per_token, int ranks, int block_size, int max_blocks,
                     int context) {
  return {kv_bytes_per_token / ranks * block_size, max_blocks,
          (context + block_size - 1) / block_size};
}

std::shared_ptr<KvMemory> make_ranked_kv_memory(const KvMemoryFactory& factory, int ranks,
                                                const RankLease& lease) {
  const auto pool = [&](int rank) {
    return factory(lease.block_bytes, lease.max_blocks, lease.min_blocks, rank);
  };
  if (ranks <= 1) return pool(0);
  std::vector<std::shared_ptr<KvMemory>> pools;
  for (int r = 0; r < ranks; ++r) pools.push_back(pool(r));
  return std::make_shared<RankedKvMemory>(std::move(pools));
}

}  // namespace hearth
