#include "worker/engine/structured/byte_language.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

namespace hearth::structured {

LangPtr byte_set(const std::bitset<256>& set) {
  auto l = std::make_shared<Lang>();
  l->kind = Lang::Kind::Bytes;
  l->bytes = set;
  return l;
}

LangPtr byte_range(uint8_t lo, uint8_t hi) {
  std::bitset<256> s;
  for (int b = lo; b <= hi; ++b) s.set(size_t(b));
  return byte_set(s);
}

LangPtr literal(std::string_view bytes) {
  std::vector<LangPtr> parts;
  for (char c : bytes) parts.push_back(byte_range(uint8_t(c), uint8_t(c)));
  return seq(std::move(parts));
}

LangPtr seq(std::vector<LangPtr> parts) {
  if (parts.size() == 1) return parts[0];
  auto l = std::make_shared<Lang>();
  l->kind = Lang::Kind::Seq;
  l->parts = std::move(parts);
  return l;
}

LangPtr alt(std::vector<LangPtr> parts) {
  if (parts.size() == 1) return parts[0];
  auto l = std::make_shared<Lang>();
  l->kind = Lang::Kind::Alt;
  l->parts = std::move(parts);
  return l;
}

LangPtr repeat(LangPtr part, int min, int max) {
  auto l = std::make_shared<Lang>();
  l->kind = Lang::Kind::Repeat;
  l->parts = {std::move(part)};
  l->min = min;
  l->max = max;
  return l;
}

namespace {

int utf8_length(uint32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

void encode(uint32_t cp, uint8_t out[4]) {
  const int n = utf8_length(cp);
  if (n == 1) {
    out[0] = uint8_t(cp);
    return;
  }
  static constexpr uint8_t kLead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1; i > 0; --i, cp >>= 6) out[i] = uint8_t(0x80 | (cp & 0x3F));
  out[0] = uint8_t(kLead[n] | cp);
}

// Splits [lo, hi] until each piece is one byte range per position of its encoding.
void utf8_pieces(uint32_t lo, uint32_t hi, std::vector<LangPtr>& out) {
  if (lo > hi) return;
  for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu})
    if (lo <= edge && hi > edge) {
      utf8_pieces(lo, edge, out);
      utf8_pieces(edge + 1, hi, out);
      return;
    }
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_pieces(lo, lo | m, out);
        utf8_pieces((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_pieces(lo, (hi & ~m) - 1, out);
        utf8_pieces(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  std::vector<LangPtr> parts;
  for (int i = 0; i < n; ++i) parts.push_back(byte_range(a[i], b[i]));
  out.push_back(seq(std::move(parts)));
}

}  // namespace

LangPtr utf8_range(uint32_t lo, uint32_t hi) {
  return utf8_ranges({{lo, hi}});
}

LangPtr utf8_ranges(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  std::vector<LangPtr> out;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, 0x10FFFFu);
    if (lo <= 0xDFFF && hi >= 0xD800) {  // no surrogates: they have no UTF-8 encoding
      if (lo < 0xD800) utf8_pieces(lo, 0xD7FF, out);
      if (hi > 0xDFFF) utf8_pieces(0xE000, hi, out);
    } else {
      utf8_pieces(lo, hi, out);
    }
  }
  return alt(std::move(out));
}

namespace {

// A nondeterministic automaton: each state has epsilon moves and at most one byte-set move.
struct Nfa {
  struct State {
    std::vector<int> eps;
    int set = -1;  // index into sets, -1: none
    int to = -1;
  };
  std::vector<State> states;
  std::vector<std::bitset<256>> sets;
  int accept = 0;
  // (piece, continuation) -> entry state, so shared pieces with a shared continuation compile
  // once.
  std::map<std::pair<const Lang*, int>, int> memo;
  size_t limit = 0;

  int add() {
    if (states.size() >= limit)
      throw LanguageTooLarge("the grammar needs more than " + std::to_string(limit) +
                             " automaton states");
    states.emplace_back();
    return int(states.size()) - 1;
  }

  // The entry state of `l` followed by the state `next`.
  int compile(const Lang& l, int next) {
    const auto key = std::make_pair(&l, next);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    int entry = next;
    switch (l.kind) {
      case Lang::Kind::Bytes: {
        entry = add();
        sets.push_back(l.bytes);
        states[size_t(entry)].set = int(sets.size()) - 1;
        states[size_t(entry)].to = next;
        break;
      }
      case Lang::Kind::Seq:
        for (size_t i = l.parts.size(); i-- > 0;) entry = compile(*l.parts[i], entry);
        break;
      case Lang::Kind::Alt: {
        entry = add();
        for (const LangPtr& p : l.parts) {
          const int e = compile(*p, next);
          states[size_t(entry)].eps.push_back(e);
        }
        break;
      }
      case Lang::Kind::Repeat: {
        const Lang& part = *l.parts[0];
        int cur = next;
        if (l.max < 0) {
          cur = add();
          const int body = compile(part, cur);
          states[size_t(cur)].eps = {body, next};
        } else {
          for (int i = l.min; i < l.max; ++i) {
            const int s = add();
            const int body = compile(part, cur);
            states[size_t(s)].eps = {body, next};
            cur = s;
          }
        }
        for (int i = 0; i < l.min; ++i) cur = compile(part, cur);
        entry = cur;
        break;
      }
    }
    memo.emplace(key, entry);
    return entry;
  }

  void closure(std::vector<int>& set, std::vector<char>& seen) const {
    std::vector<int> stack(set.begin(), set.end());
    for (int s : set) seen[size_t(s)] = 1;
    while (!stack.empty()) {
      const int s = stack.back();
      stack.pop_back();
      for (int e : states[size_t(s)].eps)
        if (!seen[size_t(e)]) {
          seen[size_t(e)] = 1;
          set.push_back(e);
          stack.push_back(e);
        }
    }
    for (int s : set) seen[size_t(s)] = 0;
    std::sort(set.begin(), set.end());
  }
};

struct VectorHash {
  size_t operator()(const std::vector<int>& v) const {
    size_t h = v.size();
    for (int x : v) h = h * 1000003u ^ size_t(x);
    return h;
  }
};

}  // namespace

ByteDfa ByteDfa::compile(const LangPtr& lang, int max_states) {
  Nfa nfa;
  nfa.limit = size_t(max_states) * 8;  // a generous bound on states per DFA state
  nfa.accept = nfa.add();
  const int start = nfa.compile(*lang, nfa.accept);

  // Byte classes: bytes that every set treats alike.
  ByteDfa dfa;
  {
    std::vector<int> cls(256, 0);
    int count = 1;
    for (const auto& set : nfa.sets) {
      std::map<std::pair<int, bool>, int> split;
      for (int b = 0; b < 256; ++b) {
        const auto key = std::make_pair(cls[size_t(b)], bool(set[size_t(b)]));
        auto [it, fresh] = split.emplace(key, int(split.size()));
        cls[size_t(b)] = it->second;
      }
      count = int(split.size());
    }
    dfa.classes_ = count;
    for (int b = 0; b < 256; ++b) dfa.class_of_[b] = uint8_t(cls[size_t(b)]);
  }
  std::vector<int> representative(size_t(dfa.classes_), 0);
  for (int b = 255; b >= 0; --b) representative[dfa.class_of_[b]] = b;

  std::vector<char> seen(nfa.states.size(), 0);
  std::unordered_map<std::vector<int>, int32_t, VectorHash> ids;
  std::vector<std::vector<int>> sets;
  std::vector<int32_t> table;
  std::vector<bool> accepting;
  auto intern = [&](std::vector<int> set) -> int32_t {
    if (set.empty()) return kDead;
    nfa.closure(set, seen);
    auto [it, fresh] = ids.emplace(set, int32_t(sets.size()));
    if (fresh) {
      if (int(sets.size()) >= max_states)
        throw LanguageTooLarge("the grammar needs more than " + std::to_string(max_states) +
                               " automaton states");
      sets.push_back(std::move(set));
    }
    return it->second;
  };
  intern({start});
  for (size_t d = 0; d < sets.size(); ++d) {
    const std::vector<int> set = sets[d];
    accepting.push_back(std::binary_search(set.begin(), set.end(), nfa.accept));
    for (int c = 0; c < dfa.classes_; ++c) {
      const int b = representative[size_t(c)];
      std::vector<int> moved;
      for (int s : set) {
        const Nfa::State& st = nfa.states[size_t(s)];
        if (st.set >= 0 && nfa.sets[size_t(st.set)][size_t(b)]) moved.push_back(st.to);
      }
      std::sort(moved.begin(), moved.end());
      moved.erase(std::unique(moved.begin(), moved.end()), moved.end());
      table.push_back(intern(std::move(moved)));
    }
  }

  // States from which no accepting state can be reached become dead, so a walk never enters
  // a state it cannot finish from.
  const size_t n = sets.size(), k = size_t(dfa.classes_);
  std::vector<std::vector<int32_t>> preds(n);
  for (size_t s = 0; s < n; ++s)
    for (size_t c = 0; c < k; ++c)
      if (table[s * k + c] != kDead) preds[size_t(table[s * k + c])].push_back(int32_t(s));
  std::vector<char> live(n, 0);
  std::vector<int32_t> stack;
  for (size_t s = 0; s < n; ++s)
    if (accepting[s]) live[s] = 1, stack.push_back(int32_t(s));
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t p : preds[size_t(s)])
      if (!live[size_t(p)]) live[size_t(p)] = 1, stack.push_back(p);
  }
  if (!live[0]) throw std::runtime_error("the grammar matches no string at all");
  std::vector<int32_t> renumber(n, kDead);
  int32_t next_id = 0;
  for (size_t s = 0; s < n; ++s)
    if (live[s]) renumber[s] = next_id++;
  dfa.table_.reserve(size_t(next_id) * k);
  for (size_t s = 0; s < n; ++s) {
    if (!live[s]) continue;
    for (size_t c = 0; c < k; ++c) {
      const int32_t t = table[s * k + c];
      dfa.table_.push_back(t == kDead ? kDead : renumber[size_t(t)]);
    }
    dfa.accepting_.push_back(accepting[s]);
  }
  return dfa;
}

int32_t ByteDfa::walk(int32_t state, std::string_view bytes) const {
  for (char c : bytes) {
    if (state == kDead) return kDead;
    state = next(state, uint8_t(c));
  }
  return state;
}

bool ByteDfa::matches(std::string_view bytes) const {
  const int32_t s = walk(0, bytes);
  return s != kDead && accepting(s);
}

}  // namespace hearth::structured
