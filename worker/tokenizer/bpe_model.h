// The BPE model of tokenizer.json: vocabulary, ranked merges, and the rules for characters the
// vocabulary lacks (byte_fallback, unk_token, fuse_unk), ignore_merges (Llama 3), and the
// continuing_subword_prefix / end_of_word_suffix decorations. Turns one pre-tokenized word
// into ids with a priority-queue merge (O(n log n) in the word length).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "flat_hash.h"
#include "word_cache.h"

namespace hearth::tok {

class BpeModel {
 public:
  // `model` is the "model" object of tokenizer.json; errors name `where`.
  static std::unique_ptr<BpeModel> from_json(const Json& model, const std::string& where);

  // Appends the ids of `word` to out. Thread-safe.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  // -1 when the vocabulary has no such token.
  int32_t token_to_id(std::string_view token) const { return vocab_.find(token); }
  // nullptr when the id is not in the vocabulary.
  const std::string* id_to_token(int32_t id) const;
  size_t vocab_size() const { return vocab_.size(); }

 private:
  BpeModel() = default;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t symbol_id(std::string_view piece, bool first, bool last) const;

  StringIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_id_;
  MergeMap merges_;
  // Ids of single-character tokens below U+10000, the first lookup of every merge.
  std::vector<int32_t> char_ids_;
  std::array<int32_t, 256> byte_ids_{};  // "<0xAB>" tokens, -1 where absent
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  WordCache cache_;
};

}  // namespace hearth::tok
