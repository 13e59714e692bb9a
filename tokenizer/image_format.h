// The tokenizer image: a loaded tokenizer in one flat, read-only, position-independent block
// that a process maps and encodes from in place (see README.md, "Tokenizer image").
//
//   ImageHeader (208 bytes)   magic "HEARTHTK", version, total size, XXH3-128 checksum of
//                             everything after the checksum field, XXH3-128 of the source
//                             tokenizer.json, and the offset and size of each section
//   settings                  tokenizer.json without model.vocab and model.merges, as compact
//                             JSON (normalizer, pre-tokenizer, post-processor, decoder, added
//                             tokens, model options): a few KB, parsed in well under a ms
//   strings                   every distinct token spelling once, concatenated
//   vocab                     VocabSlot[2^k]   spelling -> id (flat_hash.h)
//   id_tokens                 TokenRef[max id + 1]   id -> spelling (bpe_tables.h)
//   merges                    MergeSlot[2^k]   (left, right) -> rank, merged id (flat_hash.h)
//   char_ids                  int32[<= 65536]  code point -> id of the one-character token
//
// Sections start on 64-byte boundaries in this order; padding is zero. Integers are
// little-endian. Any change to this layout, to the slot structs, or to the hash functions of
// flat_hash.h needs a new kImageVersion: a reader refuses every version but its own.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/digest.h"

namespace hearth::tok {

static_assert(std::endian::native == std::endian::little,
              "tokenizer images are little-endian and read in place");

inline constexpr std::array<char, 8> kImageMagic = {'H', 'E', 'A', 'R', 'T', 'H', 'T', 'K'};
inline constexpr uint32_t kImageVersion = 1;
inline constexpr size_t kSectionAlign = 64;

enum class Section : uint32_t { kSettings, kStrings, kVocab, kIdTokens, kMerges, kCharIds };
inline constexpr size_t kSectionCount = 6;

inline constexpr std::string_view section_name(Section s) {
  constexpr std::array<std::string_view, kSectionCount> names = {
      "settings", "strings", "vocab", "id_tokens", "merges", "char_ids"};
  return names[static_cast<size_t>(s)];
}

struct SectionEntry {
  uint32_t kind;      // its index: sections[i].kind == i
  uint32_t reserved;  // zero
  uint64_t offset;    // from the start of the image
  uint64_t size;      // bytes
};

struct ImageHeader {
  std::array<char, 8> magic;
  uint32_t version;
  uint32_t header_size;  // sizeof(ImageHeader)
  uint64_t total_size;   // the whole image, header included
  Digest128 checksum;    // XXH3-128 of bytes [kChecksummedFrom, total_size)
  // --- everything from here on is covered by the checksum ---
  Digest128 source_hash;   // XXH3-128 of the tokenizer.json bytes the image was built from
  uint32_t section_count;  // kSectionCount
  uint32_t reserved;       // zero
  std::array<SectionEntry, kSectionCount> sections;
};
static_assert(sizeof(ImageHeader) == 208 && alignof(ImageHeader) == 8);

inline constexpr size_t kChecksummedFrom = offsetof(ImageHeader, source_hash);

}  // namespace hearth::tok
