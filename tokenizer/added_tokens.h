// Added tokens (tokenizer.json "added_tokens"): special tokens such as <|begin_of_text|> and
// user-added words that bypass the model. Finds them in text (leftmost-longest), honouring
// their single_word / lstrip / rstrip / normalized flags, and knows which ids are special.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config.h"

namespace hearth::tok {

class BpeModel;
class Normalizer;

struct AddedToken {
  std::string content;
  // What decoding emits for the token: the content, or for a normalized token the content
  // after the normalizer (the reference decodes normalized added tokens that way).
  std::string decoded;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedVocabulary {
 public:
  // A byte range of the text being split: an added token (id >= 0) or plain text (id == -1).
  struct Piece {
    size_t begin;
    size_t end;
    int32_t id;
  };

  // `normalizer` (may be null) is applied to the content of normalized tokens, since those
  // are matched against normalized text.
  static AddedVocabulary from_json(const Json& list, const std::string& where,
                                   const BpeModel& model, const Normalizer* normalizer);

  // Splits `text` on the tokens matched before normalization (normalized == false) or after
  // it (normalized == true). Pieces cover the text except whitespace absorbed by lstrip/rstrip.
  void split(std::string_view text, bool normalized_tokens, std::vector<Piece>& out) const;

  bool has_normalized_tokens() const { return !normalized_.empty(); }

  // -1 when no added token has this content.
  int32_t token_to_id(std::string_view content) const;
  // nullptr when the id is not an added token.
  const AddedToken* find(int32_t id) const;
  bool is_special(int32_t id) const {
    const AddedToken* t = find(id);
    return t != nullptr && t->special;
  }
  // Whether decode with skip_special_tokens drops a token spelled this way. The reference
  // compares spellings, not ids, against the contents declared special.
  bool is_special_content(std::string_view token) const {
    return !special_contents_.empty() && special_contents_.find(token) != special_contents_.end();
  }
  // Distinct added contents that the model vocabulary does not already hold.
  size_t count_outside(const BpeModel& model) const;

 private:
  // Leftmost-longest multi-pattern matcher over bytes (a trie; the token lists are short).
  class Matcher {
   public:
    void add(std::string_view pattern, uint32_t token_index);
    bool empty() const { return nodes_.size() == 1; }
    bool find(std::string_view text, size_t from, size_t* begin, size_t* end,
              uint32_t* token_index) const;

   private:
    struct Node {
      std::vector<std::pair<unsigned char, uint32_t>> children;
      int64_t token = -1;
    };
    uint32_t child(uint32_t node, unsigned char c) const;
    std::vector<Node> nodes_{Node{}};
    std::array<bool, 256> first_byte_{};
  };

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::vector<AddedToken> tokens_;
  std::unordered_set<std::string, Hash, std::equal_to<>> special_contents_;
  std::unordered_map<std::string, uint32_t> by_content_;
  std::unordered_map<int32_t, uint32_t> by_id_;
  Matcher raw_;
  Matcher normalized_;
};

}  // namespace hearth::tok
