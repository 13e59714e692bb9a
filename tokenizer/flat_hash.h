// Open-addressing hash tables for the two hot lookups of BPE: token text -> id over a
// vocabulary of ~10^5 strings, and (left id, right id) -> merge. They are laid out exactly as a
// tokenizer image stores them (image_format.h): flat arrays of fixed-size slots, keys as offsets
// into one strings section, no pointers. A table is built once by its builder and then read in
// place through a view, from the builder's vectors or straight from a mapped image, so lookups
// from many threads need no locking and opening an image rebuilds nothing.
//
// The hash functions, slot layouts and probe sequence are part of the image format: changing
// any of them requires a new kImageVersion.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
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

// Slots per table: a power of two at most kMaxLoad full, so a probe always meets an empty
// slot and stays short.
inline constexpr double kMaxLoad = 0.6;
inline size_t table_capacity(size_t entries) {
  size_t capacity = 16;
  while (static_cast<double>(entries) > kMaxLoad * static_cast<double>(capacity)) capacity <<= 1;
  return capacity;
}

// ---------------------------------------------------------------------------------------------
// Token text -> id.

struct VocabSlot {
  static constexpr uint32_t kEmpty = UINT32_MAX;  // in `length`
  uint32_t tag = 0;          // high half of the key's hash: most mismatches stop here
  uint32_t length = kEmpty;  // key bytes
  uint32_t offset = 0;       // where the key starts in the strings section
  int32_t id = -1;
};
static_assert(sizeof(VocabSlot) == 16 && std::is_trivially_copyable_v<VocabSlot>);

class VocabTable {
 public:
  VocabTable() = default;
  // `slots.size()` is a power of two with at least one empty slot, and every key lies inside
  // `strings` (image_reader.cc checks both before a mapped table is used).
  VocabTable(std::span<const VocabSlot> slots, std::string_view strings)
      : slots_(slots), strings_(strings), mask_(slots.empty() ? 0 : slots.size() - 1) {}

  // -1 when absent.
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash_bytes(key);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const VocabSlot& slot = slots_[i];
      if (slot.length == VocabSlot::kEmpty) return -1;
      if (slot.tag == tag && std::string_view(strings_.data() + slot.offset, slot.length) == key) {
        return slot.id;
      }
    }
  }

 private:
  std::span<const VocabSlot> slots_;
  std::string_view strings_;
  size_t mask_ = 0;
};

// Builds a VocabTable's slots, appending each distinct key to a strings section once.
class VocabTableBuilder {
 public:
  VocabTableBuilder(std::string& strings, size_t expected_entries)
      : strings_(strings), slots_(table_capacity(expected_entries)), mask_(slots_.size() - 1) {}

  // Maps `key` to `id` (overwriting the id of an existing key) and returns where the key lies
  // in the strings section.
  uint32_t insert(std::string_view key, int32_t id) {
    if (static_cast<double>(size_ + 1) > kMaxLoad * static_cast<double>(slots_.size())) {
      rehash(slots_.size() * 2);
    }
    const uint64_t h = hash_bytes(key);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      VocabSlot& slot = slots_[i];
      if (slot.length == VocabSlot::kEmpty) {
        if (strings_.size() + key.size() > UINT32_MAX) {
          throw std::length_error("tokenizer vocabulary exceeds 4 GiB of token text");
        }
        slot = {tag, static_cast<uint32_t>(key.size()), static_cast<uint32_t>(strings_.size()), id};
        strings_.append(key);
        ++size_;
        return slot.offset;
      }
      if (slot.tag == tag && std::string_view(strings_.data() + slot.offset, slot.length) == key) {
        slot.id = id;
        return slot.offset;
      }
    }
  }

  VocabTable view() const { return VocabTable(slots_, strings_); }
  size_t size() const { return size_; }
  std::vector<VocabSlot> take_slots() { return std::move(slots_); }

 private:
  void rehash(size_t capacity) {
    std::vector<VocabSlot> old = std::move(slots_);
    slots_.assign(capacity, VocabSlot{});
    mask_ = capacity - 1;
    for (const VocabSlot& s : old) {
      if (s.length == VocabSlot::kEmpty) continue;
      const std::string_view key(strings_.data() + s.offset, s.length);
      size_t i = hash_bytes(key) & mask_;
      while (slots_[i].length != VocabSlot::kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::string& strings_;
  std::vector<VocabSlot> slots_;
  size_t mask_;
  size_t size_ = 0;
};

// ---------------------------------------------------------------------------------------------
// (left id, right id) -> (rank, merged id).

struct MergeSlot {
  static constexpr uint64_t kEmpty = UINT64_MAX;  // ids are < 2^31, so never a real key
  uint64_t key = kEmpty;                          // left id << 32 | right id
  uint32_t rank = 0;
  int32_t merged = -1;

  static uint64_t pack(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
};
static_assert(sizeof(MergeSlot) == 16 && std::is_trivially_copyable_v<MergeSlot>);

class MergeTable {
 public:
  MergeTable() = default;
  // `slots.size()` is a power of two with at least one empty slot.
  explicit MergeTable(std::span<const MergeSlot> slots)
      : slots_(slots), mask_(slots.empty() ? 0 : slots.size() - 1) {}

  // nullptr when the pair does not merge.
  const MergeSlot* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = MergeSlot::pack(left, right);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      const MergeSlot& slot = slots_[i];
      if (slot.key == MergeSlot::kEmpty) return nullptr;
      if (slot.key == key) return &slot;
    }
  }

 private:
  std::span<const MergeSlot> slots_;
  size_t mask_ = 0;
};

// Builds a MergeTable's slots. Inserting an existing pair overwrites it, so the last of
// duplicate merges wins, as in the reference.
class MergeTableBuilder {
 public:
  explicit MergeTableBuilder(size_t expected_entries)
      : slots_(table_capacity(expected_entries)), mask_(slots_.size() - 1) {}

  void insert(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
    if (static_cast<double>(size_ + 1) > kMaxLoad * static_cast<double>(slots_.size())) {
      rehash(slots_.size() * 2);
    }
    const uint64_t key = MergeSlot::pack(left, right);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      MergeSlot& slot = slots_[i];
      if (slot.key == MergeSlot::kEmpty) ++size_;
      if (slot.key == MergeSlot::kEmpty || slot.key == key) {
        slot = {key, rank, merged};
        return;
      }
    }
  }

  std::vector<MergeSlot> take_slots() { return std::move(slots_); }

 private:
  void rehash(size_t capacity) {
    std::vector<MergeSlot> old = std::move(slots_);
    slots_.assign(capacity, MergeSlot{});
    mask_ = capacity - 1;
    for (const MergeSlot& s : old) {
      if (s.key == MergeSlot::kEmpty) continue;
      size_t i = mix64(s.key) & mask_;
      while (slots_[i].key != MergeSlot::kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<MergeSlot> slots_;
  size_t mask_;
  size_t size_ = 0;
};

}  // namespace hearth::tok
