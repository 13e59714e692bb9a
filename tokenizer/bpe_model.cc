#include "bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "utf8.h"

namespace hearth::tok {
namespace {

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

BpeModel::BpeModel(const Json& settings, const std::string& where, const BpeTables& tables)
    : t_(tables) {
  continuing_subword_prefix_ = get_optional_string(settings, "continuing_subword_prefix", where);
  end_of_word_suffix_ = get_optional_string(settings, "end_of_word_suffix", where);
  fuse_unk_ = get_bool(settings, "fuse_unk", where, false);
  byte_fallback_ = get_bool(settings, "byte_fallback", where, false);
  ignore_merges_ = get_bool(settings, "ignore_merges", where, false);
  if (const auto it = settings.find("dropout"); it != settings.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() < 0.0 || it->get<double>() > 1.0) {
      config_error(where + ".dropout", "expected null or a number in [0, 1]");
    }
    // Dropout makes encoding random; hearth promises the same ids for the same text.
    if (it->get<double>() > 0.0) config_error(where + ".dropout", "BPE dropout is not supported");
  }
  const std::string unk = get_optional_string(settings, "unk_token", where);
  if (!unk.empty()) {
    unk_id_ = t_.vocab.find(unk);
    if (unk_id_ < 0) config_error(where + ".unk_token", quote(unk) + " is not in the vocabulary");
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[static_cast<size_t>(b)] = t_.vocab.find(name);
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    // Llama 3: a word that is itself a token is that token, whatever the merges would do.
    const int32_t id = t_.vocab.find(word);
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
    if (cp < t_.char_ids.size()) return t_.char_ids[cp];
    // Past the table's end only characters outside the direct range can be tokens.
    if (cp < kCharTableLimit) return -1;
    return t_.vocab.find(piece);
  }
  std::string s;
  if (!first) s = continuing_subword_prefix_;
  s.append(piece);
  if (last) s.append(end_of_word_suffix_);
  return t_.vocab.find(s);
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
    if (const MergeSlot* m = t_.merges.find(symbols[k].id, symbols[k + 1].id)) {
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
    const MergeSlot* current = t_.merges.find(left.id, right.id);
    if (current == nullptr || current->merged != top.merged) continue;

    symbols[static_cast<size_t>(left.next)].len = 0;
    left.id = top.merged;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0)
      symbols[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(top.pos);

    if (left.prev >= 0) {
      const Symbol& before = symbols[static_cast<size_t>(left.prev)];
      if (const MergeSlot* m = t_.merges.find(before.id, left.id)) {
        heap.push_back({m->rank, static_cast<uint32_t>(left.prev), m->merged});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
    if (left.next >= 0) {
      const Symbol& after = symbols[static_cast<size_t>(left.next)];
      if (const MergeSlot* m = t_.merges.find(left.id, after.id)) {
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
