#include "bpe_tables.h"

#include <algorithm>

#include "utf8.h"

namespace hearth::tok {

BpeTableData build_bpe_tables(const Json& model, const std::string& where) {
  BpeTableData t;
  const Json& vocab = require(model, "vocab", where);
  if (!vocab.is_object()) config_error(where + ".vocab", "expected an object of token: id");
  VocabTableBuilder builder(t.strings, vocab.size());
  std::vector<uint32_t> offsets;
  offsets.reserve(vocab.size());
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenId) {
      config_error(where + ".vocab", "token " + quote(token) + " has an invalid id " + id.dump());
    }
    offsets.push_back(builder.insert(token, static_cast<int32_t>(id.get<int64_t>())));
    max_id = std::max(max_id, id.get<int64_t>());
  }
  t.vocab_size = builder.size();

  t.id_tokens.assign(static_cast<size_t>(max_id + 1), TokenRef{});
  t.char_ids.assign(kCharTableLimit, -1);
  size_t char_table_end = 0;
  size_t k = 0;
  for (const auto& [token, id_json] : vocab.items()) {
    const auto id = static_cast<int32_t>(id_json.get<int64_t>());
    TokenRef& ref = t.id_tokens[static_cast<size_t>(id)];
    // Several spellings sharing an id: the first (in key order) names it.
    if (ref.length == TokenRef::kNone) ref = {offsets[k], static_cast<uint32_t>(token.size())};
    ++k;
    size_t len = 0;
    if (!token.empty() && is_valid_utf8(token)) {
      const uint32_t cp = utf8_decode(token, 0, &len);
      if (len == token.size() && cp < kCharTableLimit) {
        t.char_ids[cp] = id;
        char_table_end = std::max<size_t>(char_table_end, cp + 1);
      }
    }
  }
  t.char_ids.resize(char_table_end);

  // Merges come as "left right" strings (older files) or ["left", "right"] pairs (newer
  // files, which allow spaces inside tokens). Rank is the position in the list.
  const std::string prefix = get_optional_string(model, "continuing_subword_prefix", where);
  const Json& merges = require(model, "merges", where);
  if (!merges.is_array()) config_error(where + ".merges", "expected an array");
  const VocabTable lookup = builder.view();
  MergeTableBuilder merge_builder(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string at = where + ".merges[" + std::to_string(i) + "]";
    const Json& entry = merges[i];
    std::string left;
    std::string right;
    if (entry.is_string()) {
      const std::string s = entry.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        config_error(at, "expected two tokens separated by one space, got " + quote(s));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      config_error(at, "expected \"left right\" or [\"left\", \"right\"], got " + entry.dump());
    }
    const int32_t left_id = lookup.find(left);
    if (left_id < 0) config_error(at, "token " + quote(left) + " is not in the vocabulary");
    const int32_t right_id = lookup.find(right);
    if (right_id < 0) config_error(at, "token " + quote(right) + " is not in the vocabulary");
    if (right.size() < prefix.size()) {
      config_error(at, "token " + quote(right) + " is shorter than continuing_subword_prefix");
    }
    const std::string merged = left + right.substr(prefix.size());
    const int32_t merged_id = lookup.find(merged);
    if (merged_id < 0) {
      config_error(at, "merged token " + quote(merged) + " is not in the vocabulary");
    }
    merge_builder.insert(left_id, right_id, static_cast<uint32_t>(i), merged_id);
  }
  t.vocab = builder.take_slots();
  t.merges = merge_builder.take_slots();
  return t;
}

}  // namespace hearth::tok
