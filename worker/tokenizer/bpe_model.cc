#include "bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "utf8.h"

namespace hearth::tok {
namespace {

constexpr size_t kCharTable = 0x10000;
// Ids are int32 on the API; refuse vocabularies that would need a gigantic dense id table.
constexpr int64_t kMaxId = 1 << 26;

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
};

struct Candidate {
  uint32_t rank;
  uint32_t pos;
  int32_t merged;
};

// Min-heap order: lowest rank first, then leftmost, which makes the result identical to
// repeatedly merging the best-ranked leftmost pair.
struct Later {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

std::unique_ptr<BpeModel> BpeModel::from_json(const Json& model, const std::string& where) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  const Json& vocab = require(model, "vocab", where);
  if (!vocab.is_object()) config_error(where + ".vocab", "expected an object of token: id");
  m->vocab_.reserve(vocab.size());
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxId) {
      config_error(where + ".vocab", "token " + quote(token) + " has an invalid id " + id.dump());
    }
    m->vocab_.insert(token, static_cast<int32_t>(id.get<int64_t>()));
    max_id = std::max(max_id, id.get<int64_t>());
  }
  m->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  m->has_id_.assign(static_cast<size_t>(max_id + 1), 0);
  m->char_ids_.assign(kCharTable, -1);
  for (const auto& [token, id_json] : vocab.items()) {
    const auto id = static_cast<size_t>(id_json.get<int64_t>());
    if (m->has_id_[id]) continue;  // duplicate id: the first spelling names it
    m->has_id_[id] = 1;
    m->id_to_token_[id] = token;
    size_t len = 0;
    if (!token.empty() && is_valid_utf8(token)) {
      const uint32_t cp = utf8_decode(token, 0, &len);
      if (len == token.size() && cp < kCharTable) {
        m->char_ids_[cp] = m->vocab_.find(token);
      }
    }
  }

  auto optional_string = [&](const char* key) -> std::string {
    const auto it = model.find(key);
    if (it == model.end() || it->is_null()) return "";
    if (!it->is_string()) config_error(where + "." + key, "expected a string or null");
    return it->get<std::string>();
  };
  m->continuing_subword_prefix_ = optional_string("continuing_subword_prefix");
  m->end_of_word_suffix_ = optional_string("end_of_word_suffix");
  m->fuse_unk_ = get_bool(model, "fuse_unk", where, false);
  m->byte_fallback_ = get_bool(model, "byte_fallback", where, false);
  m->ignore_merges_ = get_bool(model, "ignore_merges", where, false);
  if (const auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() < 0.0 || it->get<double>() > 1.0) {
      config_error(where + ".dropout", "expected null or a number in [0, 1]");
    }
    // Dropout makes encoding random; hearth promises the same ids for the same text.
    if (it->get<double>() > 0.0) config_error(where + ".dropout", "BPE dropout is not supported");
  }
  const std::string unk = optional_string("unk_token");
  if (!unk.empty()) {
    m->unk_id_ = m->vocab_.find(unk);
    if (m->unk_id_ < 0) {
      config_error(where + ".unk_token", quote(unk) + " is not in the vocabulary");
    }
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    m->byte_ids_[static_cast<size_t>(b)] = m->vocab_.find(name);
  }

  // Merges come as "left right" strings (older files) or ["left", "right"] pairs (newer
  // files, which allow spaces inside tokens). Rank is the position in the list.
  const Json& merges = require(model, "merges", where);
  if (!merges.is_array()) config_error(where + ".merges", "expected an array");
  m->merges_.reserve(merges.size());
  const size_t prefix_len = m->continuing_subword_prefix_.size();
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
    const int32_t left_id = m->vocab_.find(left);
    if (left_id < 0) config_error(at, "token " + quote(left) + " is not in the vocabulary");
    const int32_t right_id = m->vocab_.find(right);
    if (right_id < 0) config_error(at, "token " + quote(right) + " is not in the vocabulary");
    if (right.size() < prefix_len) {
      config_error(at, "token " + quote(right) + " is shorter than continuing_subword_prefix");
    }
    const std::string merged = left + right.substr(prefix_len);
    const int32_t merged_id = m->vocab_.find(merged);
    if (merged_id < 0) {
      config_error(at, "merged token " + quote(merged) + " is not in the vocabulary");
    }
    m->merges_.insert(left_id, right_id, {static_cast<uint32_t>(i), merged_id});
  }
  return m;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= has_id_.size() || !has_id_[static_cast<size_t>(id)]) {
    return nullptr;
  }
  return &id_to_token_[static_cast<size_t>(id)];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    // Llama 3: a word that is itself a token is that token, whatever the merges would do.
    const int32_t id = vocab_.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (cache_.lookup(word, out)) return;
  const size_t before = out.size();
  merge_word(word, out);
  cache_.store(word, out.data() + before, out.size() - before);
}

int32_t BpeModel::symbol_id(std::string_view piece, bool first, bool last) const {
  const bool decorate =
      (!first && !continuing_subword_prefix_.empty()) || (last && !end_of_word_suffix_.empty());
  if (!decorate) {
    size_t len = 0;
    const uint32_t cp = utf8_decode(piece, 0, &len);
    if (cp < kCharTable) return char_ids_[cp];
    return vocab_.find(piece);
  }
  std::string s;
  if (!first) s = continuing_subword_prefix_;
  s.append(piece);
  if (last) s.append(end_of_word_suffix_);
  return vocab_.find(s);
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  auto add = [&](int32_t id, size_t len) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, static_cast<uint32_t>(len)});
  };

  // One symbol per character; a character outside the vocabulary becomes its bytes'
  // <0xXX> tokens (byte_fallback), else the unknown token (consecutive ones fused into one
  // when fuse_unk), else nothing.
  int32_t pending_unk_len = -1;
  for (size_t i = 0; i < word.size();) {
    const size_t len = utf8_len(static_cast<unsigned char>(word[i]));
    const bool first = i == 0;
    const bool last = i + len >= word.size();
    const std::string_view piece = word.substr(i, len);
    i += len;
    const int32_t id = symbol_id(piece, first, last);
    if (id >= 0) {
      if (pending_unk_len >= 0) {
        add(unk_id_, static_cast<size_t>(pending_unk_len));
        pending_unk_len = -1;
      }
      add(id, len);
      continue;
    }
    if (byte_fallback_) {
      // The bytes spelled are those of the decorated symbol, as in the reference.
      std::string decorated(first ? "" : continuing_subword_prefix_);
      decorated.append(piece);
      if (last) decorated.append(end_of_word_suffix_);
      const bool all_known = std::all_of(decorated.begin(), decorated.end(), [&](char c) {
        return byte_ids_[static_cast<uint8_t>(c)] >= 0;
      });
      if (all_known) {
        for (const char c : decorated) add(byte_ids_[static_cast<uint8_t>(c)], 1);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk_len >= 0 && fuse_unk_) {
        pending_unk_len += static_cast<int32_t>(len);
      } else {
        if (pending_unk_len >= 0) add(unk_id_, static_cast<size_t>(pending_unk_len));
        pending_unk_len = static_cast<int32_t>(len);
      }
    }
  }
  if (pending_unk_len >= 0) add(unk_id_, static_cast<size_t>(pending_unk_len));
  if (symbols.empty()) return;

  const Later later;
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const MergeMap::Merge* m = merges_.find(symbols[k].id, symbols[k + 1].id)) {
      heap.push_back({m->rank, static_cast<uint32_t>(k), m->merged});
    }
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const Symbol right = symbols[static_cast<size_t>(left.next)];
    // Entries go stale when a neighbour merged since they were queued; skip those.
    const MergeMap::Merge* current = merges_.find(left.id, right.id);
    if (current == nullptr || current->merged != top.merged) continue;

    symbols[static_cast<size_t>(left.next)].len = 0;
    left.id = top.merged;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0)
      symbols[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(top.pos);

    if (left.prev >= 0) {
      const Symbol& before = symbols[static_cast<size_t>(left.prev)];
      if (const MergeMap::Merge* m = merges_.find(before.id, left.id)) {
        heap.push_back({m->rank, static_cast<uint32_t>(left.prev), m->merged});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
    if (left.next >= 0) {
      const Symbol& after = symbols[static_cast<size_t>(left.next)];
      if (const MergeMap::Merge* m = merges_.find(left.id, after.id)) {
        heap.push_back({m->rank, top.pos, m->merged});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
  }
  for (int32_t k = 0; k >= 0; k = symbols[static_cast<size_t>(k)].next) {
    out.push_back(symbols[static_cast<size_t>(k)].id);
  }
  // A one-off huge word (a megabyte without spaces) should not pin its scratch per thread.
  if (symbols.capacity() > (1u << 16)) {
    symbols = {};
    heap = {};
  }
}

}  // namespace hearth::tok
