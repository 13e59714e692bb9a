#include "worker/engine/ranked_kv_memory.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "worker/engine/cache_domain.h"

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
  // Sharing when every rank shares, with its foreign blocks at the same ids.
  for (const auto& rank : ranks_) {
    SharedKv* shared = rank->shared();
    if (!shared || shared->first_foreign_block() != ranks_[0]->shared()->first_foreign_block()) {
      shared_.clear();
      break;
    }
    shared_.push_back(shared);
  }
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

int RankedKvMemory::foreign_capacity() const {
  int room = shared_[0]->foreign_capacity();
  for (const SharedKv* rank : shared_) room = std::min(room, rank->foreign_capacity());
  return room;
}

void RankedKvMemory::set_domain(const BlockKey& domain) {
  for (size_t r = 0; r < shared_.size(); ++r) shared_[r]->set_domain(rank_key(domain, int(r)));
}

namespace {

// A chain in rank `rank`'s keys (rank_key): root and links.
struct RankChain {
  BlockKey root;
  std::vector<SharedKvLink> links;

  RankChain(const BlockKey& engine_root, std::span<const SharedKvLink> chain, int rank)
      : root(rank_key(engine_root, rank)) {
    links.reserve(chain.size());
    for (const SharedKvLink& link : chain) links.push_back({rank_key(link.key, rank), link.tokens});
  }
};

}  // namespace

std::vector<int32_t> RankedKvMemory::find(const BlockKey& root,
                                          std::span<const SharedKvLink> chain) {
  const RankChain first(root, chain, 0);
  return found_on_every_rank(root, chain, shared_[0]->find(first.root, first.links));
}

std::vector<int32_t> RankedKvMemory::find_at(const BlockKey& root,
                                             std::span<const SharedKvLink> chain,
                                             std::span<const int32_t> ids) {
  const RankChain first(root, chain, 0);
  return found_on_every_rank(root, chain, shared_[0]->find_at(first.root, first.links, ids));
}

std::vector<int32_t> RankedKvMemory::found_on_every_rank(const BlockKey& root,
                                                         std::span<const SharedKvLink> chain,
                                                         std::vector<int32_t> ids) {
  // Every rank past the first must find rank 0's blocks at rank 0's ids. The run is what all
  // of them found; each gives back what it found past that.
  const std::span<const int32_t> all(ids);
  std::vector<size_t> found(shared_.size(), 0);
  found[0] = ids.size();
  size_t by_all = ids.size(), asked = 1;
  try {
    for (; asked < shared_.size() && by_all > 0; ++asked) {
      const RankChain mine(root, chain.first(by_all), int(asked));
      found[asked] = shared_[asked]->find_at(mine.root, mine.links, all.first(by_all)).size();
      by_all = std::min(by_all, found[asked]);
    }
  } catch (...) {
    // A provider gone or lying: the ranks before it give back all they found.
    for (size_t q = 0; q < asked; ++q) try {
        give_back(q, all.first(found[q]));
      } catch (...) {
      }
    throw;
  }
  for (size_t q = 0; q < asked; ++q) give_back(q, all.subspan(by_all, found[q] - by_all));
  ids.resize(by_all);
  return ids;
}

void RankedKvMemory::give_back(size_t rank, std::span<const int32_t> ids) {
  std::vector<int32_t> foreign;
  for (int32_t id : ids)
    if (id >= first_foreign_block()) foreign.push_back(id);
  if (!foreign.empty()) shared_[rank]->release(foreign);
}

void RankedKvMemory::release(std::span<const int32_t> foreign) {
  for (SharedKv* rank : shared_) rank->release(foreign);
}

uint64_t RankedKvMemory::publish(std::span<const SharedKvBlock> blocks) {
  uint64_t fewest = UINT64_MAX;
  std::vector<SharedKvBlock> mine(blocks.begin(), blocks.end());
  for (size_t r = 0; r < shared_.size(); ++r) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      mine[i].key = rank_key(blocks[i].key, int(r));
      mine[i].parent = rank_key(blocks[i].parent, int(r));
    }
    fewest = std::min(fewest, shared_[r]->publish(mine));
  }
  return fewest;
}

std::vector<int32_t> RankedKvMemory::withdraw(std::span<const int32_t> own) {
  std::vector<int32_t> free = shared_[0]->withdraw(own);
  for (size_t r = 1; r < shared_.size(); ++r) {
    const std::vector<int32_t> here = shared_[r]->withdraw(own);
    std::erase_if(free,
                  [&](int32_t b) { return std::find(here.begin(), here.end(), b) == here.end(); });
  }
  return free;
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
