#include "worker/engine/prefix_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace hearth {

namespace {

BlockKey hash_bytes(const std::vector<unsigned char>& bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return {h.low64, h.high64};
}

void append(std::vector<unsigned char>& bytes, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  bytes.insert(bytes.end(), p, p + n);
}

void append_key(std::vector<unsigned char>& bytes, const BlockKey& key) {
  append(bytes, &key.low, sizeof key.low);
  append(bytes, &key.high, sizeof key.high);
}

}  // namespace

BlockKey chain_root_key(const BlockKey& domain, std::string_view cache_salt) {
  std::vector<unsigned char> bytes;
  static constexpr char kTag[] = "hearth prefix chain root";
  append(bytes, kTag, sizeof kTag);
  append_key(bytes, domain);
  append(bytes, cache_salt.data(), cache_salt.size());
  return hash_bytes(bytes);
}

BlockKey chain_block_key(const BlockKey& parent, std::span<const int32_t> tokens) {
  std::vector<unsigned char> bytes;
  bytes.reserve(16 + tokens.size_bytes());
  append_key(bytes, parent);
  append(bytes, tokens.data(), tokens.size_bytes());
  return hash_bytes(bytes);
}

int32_t PrefixCache::find(const BlockKey& key, const BlockKey& parent,
                          std::span<const int32_t> tokens) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return -1;
  const Entry& e = by_block_.at(it->second);
  if (!(e.parent == parent) ||
      !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end()))
    return -1;
  return it->second;
}

bool PrefixCache::insert(const BlockKey& key, const BlockKey& parent,
                         std::span<const int32_t> tokens, int32_t block) {
  if (by_block_.contains(block) || by_key_.contains(key)) return false;
  by_key_.emplace(key, block);
  by_block_.emplace(block, Entry{key, parent, {tokens.begin(), tokens.end()}});
  return true;
}

bool PrefixCache::erase(int32_t block) {
  auto it = by_block_.find(block);
  if (it == by_block_.end()) return false;
  by_key_.erase(it->second.key);
  by_block_.erase(it);
  return true;
}

void PrefixCache::clear() {
  by_key_.clear();
  by_block_.clear();
}

}  // namespace hearth
