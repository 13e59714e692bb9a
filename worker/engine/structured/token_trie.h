// The vocabulary's token byte strings as a trie, built once per tokenizer, and the walk that
// finds which tokens a byte automaton accepts from a state: one pass down the trie, cutting
// every branch at the first byte the automaton refuses, so a state's mask costs the live
// prefixes, not vocab x token length.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "worker/engine/structured/byte_language.h"

namespace hearth::structured {

class TokenTrie {
 public:
  // token_bytes[id]: the bytes of token id; "" for tokens a grammar never allows (special).
  explicit TokenTrie(const std::vector<std::string>& token_bytes);

  int vocab() const { return vocab_; }
  // Sets bit (t % 32) of mask[t / 32] for every token t whose bytes take `dfa` from `state`
  // to a state it can still finish from. `mask` holds (vocab + 31) / 32 words, cleared first.
  void allowed(const ByteDfa& dfa, int32_t state, std::span<uint32_t> mask) const;

 private:
  int vocab_ = 0;
  // Node n's children are edges [child_begin_[n], child_begin_[n + 1]) of (byte, node); the
  // tokens that end at n are token_ids_[token_begin_[n], token_begin_[n + 1]).
  std::vector<uint32_t> child_begin_, token_begin_;
  std::vector<uint8_t> edge_byte_;
  std::vector<uint32_t> edge_node_;
  std::vector<int32_t> token_ids_;
};

}  // namespace hearth::structured
