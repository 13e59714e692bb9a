#include "added_tokens.h"

#include <algorithm>

#include "bpe_model.h"
#include "normalizer.h"
#include "unicode.h"
#include "utf8.h"

namespace hearth::tok {
namespace {

uint32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t len = 0;
  return utf8_decode(s, i, &len);
}

uint32_t first_char(std::string_view s) {
  size_t len = 0;
  return utf8_decode(s, 0, &len);
}

// Start of the whitespace run that ends `s` (s.size() when there is none).
size_t trailing_space_start(std::string_view s) {
  size_t i = s.size();
  while (i > 0) {
    size_t j = i - 1;
    while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
    size_t len = 0;
    if (!is_white_space(utf8_decode(s, j, &len))) break;
    i = j;
  }
  return i;
}

// Length of the whitespace run that starts `s`.
size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    if (!is_white_space(utf8_decode(s, i, &len))) break;
    i += len;
  }
  return i;
}

}  // namespace

void AddedVocabulary::Matcher::add(std::string_view pattern, uint32_t token_index) {
  if (pattern.empty()) return;
  uint32_t node = 0;
  for (const char ch : pattern) {
    const auto c = static_cast<unsigned char>(ch);
    uint32_t next = child(node, c);
    if (next == 0) {
      next = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
      nodes_[node].children.emplace_back(c, next);
    }
    node = next;
  }
  // The first token registered for a spelling keeps it.
  if (nodes_[node].token < 0) nodes_[node].token = token_index;
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
}

uint32_t AddedVocabulary::Matcher::child(uint32_t node, unsigned char c) const {
  for (const auto& [byte, next] : nodes_[node].children) {
    if (byte == c) return next;
  }
  return 0;
}

bool AddedVocabulary::Matcher::find(std::string_view text, size_t from, size_t* begin, size_t* end,
                                    uint32_t* token_index) const {
  for (size_t i = from; i < text.size(); ++i) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) continue;
    uint32_t node = 0;
    int64_t best_token = -1;
    size_t best_end = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<unsigned char>(text[j]));
      if (node == 0) break;
      if (nodes_[node].token >= 0) {
        best_token = nodes_[node].token;
        best_end = j + 1;
      }
    }
    if (best_token >= 0) {
      *begin = i;
      *end = best_end;
      *token_index = static_cast<uint32_t>(best_token);
      return true;
    }
  }
  return false;
}

AddedVocabulary AddedVocabulary::from_json(const Json& list, const std::string& where,
                                           const BpeModel& model, const Normalizer* normalizer) {
  AddedVocabulary vocab;
  if (list.is_null()) return vocab;
  if (!list.is_array()) config_error(where, "expected an array");

  std::vector<AddedToken> declared;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const Json& j = list[i];
    AddedToken t;
    t.content = get_string(j, "content", at);
    if (!is_valid_utf8(t.content)) config_error(at + ".content", "not valid UTF-8");
    t.special = get_bool(j, "special", at, false);
    t.single_word = get_bool(j, "single_word", at, false);
    t.lstrip = get_bool(j, "lstrip", at, false);
    t.rstrip = get_bool(j, "rstrip", at, false);
    t.normalized = get_bool(j, "normalized", at, true);
    const Json& id = require(j, "id", at);
    if (!id.is_number_unsigned() || id.get<uint64_t>() > INT32_MAX) {
      config_error(at + ".id", "expected a non-negative 32-bit id");
    }
    // Ids are reassigned below, so a wild declared id used to be dropped without a word. The
    // vocabulary is the model's tokens and the added ones: no consistent file goes beyond.
    const uint64_t last = model.vocab_size() + list.size() - 1;
    std::string_view known;
    if (id.get<uint64_t>() > last && !model.id_to_token(int32_t(id.get<uint64_t>()), &known)) {
      config_error(at + ".id", std::to_string(id.get<uint64_t>()) +
                                   " is outside the vocabulary (ids 0 to " + std::to_string(last) +
                                   ": the model's " + std::to_string(model.vocab_size()) +
                                   " tokens and " + std::to_string(list.size()) + " added ones)");
    }
    t.id = static_cast<int32_t>(id.get<uint64_t>());
    declared.push_back(std::move(t));
  }

  // Ids as the reference assigns them on load (the declared ids only produce a warning there):
  // a content the model already knows keeps the model's id; the others take consecutive ids
  // from the model's vocabulary size up. For well-formed files this equals the declared id.
  std::vector<std::string> special_order;
  std::vector<std::string> plain_order;
  auto& special_set = vocab.special_contents_;
  for (const AddedToken& t : declared) {
    if (t.special && !t.content.empty() && special_set.insert(t.content).second) {
      special_order.push_back(t.content);
    }
  }
  auto next_id = static_cast<int64_t>(model.vocab_size());
  for (const AddedToken& declared_token : declared) {
    if (declared_token.content.empty()) continue;
    AddedToken t = declared_token;
    if (const auto it = vocab.by_content_.find(t.content); it != vocab.by_content_.end()) {
      t.id = vocab.tokens_[it->second].id;
    } else if (const int32_t model_id = model.token_to_id(t.content); model_id >= 0) {
      t.id = model_id;
    } else {
      if (next_id > INT32_MAX) config_error(where, "too many added tokens");
      t.id = static_cast<int32_t>(next_id++);
    }
    if (const auto it = vocab.by_id_.find(t.id); it != vocab.by_id_.end()) {
      vocab.tokens_[it->second] = t;  // a later declaration of the same token updates its flags
    } else {
      vocab.by_id_[t.id] = static_cast<uint32_t>(vocab.tokens_.size());
      vocab.tokens_.push_back(t);
    }
    vocab.by_content_[t.content] = vocab.by_id_[t.id];
    if (!special_set.contains(t.content)) plain_order.push_back(t.content);
  }

  for (AddedToken& t : vocab.tokens_) {
    t.decoded = t.content;
    size_t inserted = 0;
    if (t.normalized && normalizer != nullptr) normalizer->normalize(t.decoded, inserted);
  }
  // Special tokens are registered first, so they win a tie with a plain token's spelling.
  auto register_token = [&](const std::string& content) {
    const uint32_t index = vocab.by_content_.at(content);
    const AddedToken& t = vocab.tokens_[index];
    if (t.normalized) {
      vocab.normalized_.add(t.decoded, index);
    } else {
      vocab.raw_.add(content, index);
    }
  };
  for (const std::string& c : special_order) register_token(c);
  for (const std::string& c : plain_order) register_token(c);
  return vocab;
}

void AddedVocabulary::split(std::string_view text, bool normalized_tokens,
                            std::vector<Piece>& out) const {
  out.clear();
  const Matcher& matcher = normalized_tokens ? normalized_ : raw_;
  if (matcher.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0;
  size_t search_from = 0;
  size_t begin = 0;
  size_t end = 0;
  uint32_t index = 0;
  while (matcher.find(text, search_from, &begin, &end, &index)) {
    // The search resumes after the match itself, not after whitespace rstrip absorbs.
    search_from = end;
    const AddedToken& t = tokens_[index];
    if (t.single_word) {
      const bool space_before = begin == 0 || !is_word_char(last_char(text.substr(0, begin)));
      const bool space_after = end == text.size() || !is_word_char(first_char(text.substr(end)));
      if (!space_before || !space_after) continue;
    }
    if (t.lstrip) begin = std::max(trailing_space_start(text.substr(0, begin)), start_offset);
    if (t.rstrip) end += leading_space_length(text.substr(end));
    if (start_offset < begin) out.push_back({start_offset, begin, -1});
    out.push_back({begin, end, t.id});
    start_offset = end;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

int32_t AddedVocabulary::token_to_id(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? -1 : tokens_[it->second].id;
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

size_t AddedVocabulary::count_outside(const BpeModel& model) const {
  size_t n = 0;
  for (const auto& [content, index] : by_content_) n += model.token_to_id(content) < 0;
  return n;
}

}  // namespace hearth::tok
