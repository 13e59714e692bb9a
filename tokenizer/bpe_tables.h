// The BPE model's large tables (vocabulary, id -> token, merges, single-character ids) in the
// layout a tokenizer image stores them. build_bpe_tables() makes them from the "model" object
// of tokenizer.json; BpeTables views them in place, over the built vectors or a mapped image.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "config.h"
#include "flat_hash.h"

namespace hearth::tok {

// The spelling of one id: bytes [offset, offset + length) of the strings section.
struct TokenRef {
  static constexpr uint32_t kNone = UINT32_MAX;  // in `length`: no token has this id
  uint32_t offset = 0;
  uint32_t length = kNone;
};
static_assert(sizeof(TokenRef) == 8 && std::is_trivially_copyable_v<TokenRef>);

// Ids are int32 on the API; refuse vocabularies that would need a gigantic dense id table.
inline constexpr int64_t kMaxTokenId = 1 << 26;
// Single characters below this code point get a direct-indexed id table (the first lookup of
// every BPE merge); rarer characters go through the vocabulary hash.
inline constexpr uint32_t kCharTableLimit = 0x10000;

// Read-only views of the tables. Every span points into memory that outlives the view.
struct BpeTables {
  std::string_view strings;             // token spellings, each distinct spelling once
  VocabTable vocab;                     // spelling -> id
  size_t vocab_size = 0;                // distinct spellings
  std::span<const TokenRef> id_tokens;  // id -> spelling (the first spelling of a shared id)
  MergeTable merges;                    // (left, right) -> rank and merged id
  // id of the one-character token for code point cp < char_ids.size(), -1 where the vocabulary
  // lacks it. The table ends after the highest such code point (at most kCharTableLimit).
  std::span<const int32_t> char_ids;

  // The spelling of `id`; false when no token has it.
  bool token(int32_t id, std::string_view* out) const {
    if (id < 0 || static_cast<size_t>(id) >= id_tokens.size()) return false;
    const TokenRef& ref = id_tokens[static_cast<size_t>(id)];
    if (ref.length == TokenRef::kNone) return false;
    *out = std::string_view(strings.data() + ref.offset, ref.length);
    return true;
  }
};

// The tables as built from tokenizer.json, in vectors that become image sections.
struct BpeTableData {
  std::string strings;
  std::vector<VocabSlot> vocab;
  size_t vocab_size = 0;
  std::vector<TokenRef> id_tokens;
  std::vector<MergeSlot> merges;
  std::vector<int32_t> char_ids;

  BpeTables view() const {
    return {strings,   VocabTable(vocab, strings), vocab_size,
            id_tokens, MergeTable(merges),         char_ids};
  }
};

// Builds the tables of a tokenizer.json "model" object. Refuses, naming the JSON location
// under `where`: a vocabulary that is not an object of token: id, invalid ids, malformed merges
// and merges naming tokens outside the vocabulary.
BpeTableData build_bpe_tables(const Json& model, const std::string& where);

}  // namespace hearth::tok
