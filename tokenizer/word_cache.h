// Memo of word -> token ids for BPE, shared by every thread encoding with one tokenizer.
// Sharded locks keep threads from queueing on one mutex; once a shard is full it stops
// growing (no eviction), which bounds memory and keeps hits cheap on the common words.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flat_hash.h"

namespace hearth::tok {

class WordCache {
 public:
  // Longest word worth remembering; longer ones are rare and would bloat the cache.
  static constexpr size_t kMaxWordBytes = 128;

  // Appends the ids of `word` to out and returns true on a hit.
  bool lookup(std::string_view word, std::vector<int32_t>& out) const {
    const uint64_t h = hash_bytes(word);
    Shard& shard = shards_[h % kShards];
    std::lock_guard lock(shard.mutex);
    const auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void store(std::string_view word, const int32_t* ids, size_t count) const {
    if (word.size() > kMaxWordBytes) return;
    const uint64_t h = hash_bytes(word);
    Shard& shard = shards_[h % kShards];
    std::lock_guard lock(shard.mutex);
    if (shard.map.size() >= kEntriesPerShard) return;
    shard.map.try_emplace(std::string(word), ids, ids + count);
  }

 private:
  static constexpr size_t kShards = 32;
  static constexpr size_t kEntriesPerShard = 4096;

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return hash_bytes(s) >> 8; }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace hearth::tok
