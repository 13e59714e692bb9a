// The BPE model of tokenizer.json: vocabulary, ranked merges, and the rules for characters the
// vocabulary lacks (byte_fallback, unk_token, fuse_unk), ignore_merges (Llama 3), and the
// continuing_subword_prefix / end_of_word_suffix decorations. Turns one pre-tokenized word
// into ids with a priority-queue merge (O(n log n) in the word length). The tables are views
// (bpe_tables.h) into a tokenizer image that the owner of the model keeps alive.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bpe_tables.h"
#include "config.h"
#include "word_cache.h"

namespace hearth::tok {

class BpeModel {
 public:
  // `settings` is the "model" object of tokenizer.json (its vocab and merges are not read:
  // those are `tables`, built by build_bpe_tables); errors name `where`.
  BpeModel(const Json& settings, const std::string& where, const BpeTables& tables);

  // Appends the ids of `word` to out. Thread-safe.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  // -1 when the vocabulary has no such token.
  int32_t token_to_id(std::string_view token) const { return t_.vocab.find(token); }
  // False when the id is not in the vocabulary.
  bool id_to_token(int32_t id, std::string_view* token) const { return t_.token(id, token); }
  size_t vocab_size() const { return t_.vocab_size; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t symbol_id(std::string_view piece, bool first, bool last) const;

  BpeTables t_;
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
