// Prefix caching's index: which KV block holds the keys and values of which run of tokens, so a
// request whose prompt starts like an earlier one's takes those blocks instead of computing them.
//
// Only full blocks are indexed. A block's key chains its parent's key (the chain's root for the
// first block) with its token ids, so one key stands for the whole prefix up to the block's end;
// the root covers the cache domain (everything engine-wide that changes a block's values,
// cache_domain.h) and the request's cache_salt, so requests with different salts never share.
// Keys are XXH3 128-bit hashes: well tested, fast, and at 2^-128 per pair a collision is not a
// practical risk even over billions of blocks. Still, a hit also compares the block's stored
// parent key and token ids with the caller's; since a lookup walks a chain from its root, every
// hit then means exactly the same tokens from position 0 under the same root, and a collision
// can only ever cost a miss, never a wrong block.
//
// The index does not own blocks: KvCacheManager retains the ones it hands out and drops an
// entry when the pool reuses its block for something else (eviction).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hearth {

struct BlockKey {
  uint64_t low = 0, high = 0;
  bool operator==(const BlockKey&) const = default;
};

struct BlockKeyHash {
  size_t operator()(const BlockKey& key) const { return size_t(key.low ^ (key.high * 31)); }
};

// The root of a request's chain: the engine's cache domain and the request's cache_salt.
BlockKey chain_root_key(const BlockKey& domain, std::string_view cache_salt);
// The key of a full block: its parent's key and its token ids.
BlockKey chain_block_key(const BlockKey& parent, std::span<const int32_t> tokens);

class PrefixCache {
 public:
  // The block registered under `key` with this parent and these token ids, or -1.
  int32_t find(const BlockKey& key, const BlockKey& parent, std::span<const int32_t> tokens) const;
  // Registers `block` as holding `tokens` after `parent` under `key`. False, changing nothing,
  // when `block` is registered already or another block holds `key` (the same tokens computed
  // twice: the first stays the one found).
  bool insert(const BlockKey& key, const BlockKey& parent, std::span<const int32_t> tokens,
              int32_t block);
  // Forgets `block`; false when it was not registered.
  bool erase(int32_t block);
  bool contains(int32_t block) const { return by_block_.contains(block); }
  int size() const { return int(by_block_.size()); }
  void clear();

 private:
  struct Entry {
    BlockKey key, parent;
    std::vector<int32_t> tokens;
  };
  std::unordered_map<BlockKey, int32_t, BlockKeyHash> by_key_;
  std::unordered_map<int32_t, Entry> by_block_;
};

}  // namespace hearth
