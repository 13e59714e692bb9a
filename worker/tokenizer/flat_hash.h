// Open-addressing hash tables for the two hot lookups of BPE: token text -> id over a
// vocabulary of ~10^5 strings, and (left id, right id) -> merge. Built once, then read-only,
// so lookups from many threads need no locking. Keys live in one arena: no per-key allocation.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::tok {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

inline uint64_t hash_bytes(std::string_view s) {
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(n);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = mix64(h ^ v);
    p += 8;
    n -= 8;
  }
  uint64_t tail = 0;
  if (n > 0) std::memcpy(&tail, p, n);
  return mix64(h ^ tail ^ (static_cast<uint64_t>(n) << 59));
}

// Token text -> id. Inserting an existing key overwrites its id.
class StringIdMap {
 public:
  void reserve(size_t n) {
    size_t capacity = 16;
    while (capacity < n * 2) capacity <<= 1;
    if (capacity > slots_.size()) rehash(capacity);
  }

  void insert(std::string_view key, int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    const uint64_t h = hash_bytes(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.length == kEmpty) {
        slot = {h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
        arena_.append(key);
        ++size_;
        return;
      }
      if (slot.hash == h && key_of(slot) == key) {
        slot.id = id;
        return;
      }
    }
  }

  // -1 when absent.
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash_bytes(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.length == kEmpty) return -1;
      if (slot.hash == h && key_of(slot) == key) return slot.id;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t length = kEmpty;
    int32_t id = -1;
  };

  std::string_view key_of(const Slot& s) const { return {arena_.data() + s.offset, s.length}; }

  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (s.length == kEmpty) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].length != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// (left id, right id) -> (rank, merged id). Inserting an existing pair overwrites it, so the
// last of duplicate merges wins, as in the reference.
class MergeMap {
 public:
  struct Merge {
    uint32_t rank;
    int32_t merged;
  };

  void reserve(size_t n) {
    size_t capacity = 16;
    while (capacity < n * 2) capacity <<= 1;
    if (capacity > slots_.size()) rehash(capacity);
  }

  void insert(int32_t left, int32_t right, Merge merge) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    const uint64_t key = pack(left, right);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.key == kEmpty) {
        slot = {key, merge};
        ++size_;
        return;
      }
      if (slot.key == key) {
        slot.merge = merge;
        return;
      }
    }
  }

  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == kEmpty) return nullptr;
      if (slot.key == key) return &slot.merge;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = UINT64_MAX;  // ids are < 2^31, so never a real key
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{0, -1};
  };

  static uint64_t pack(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = mix64(s.key) & mask_;
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace hearth::tok
