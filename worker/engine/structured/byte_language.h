// Regular languages over bytes, built from small pieces (byte sets, sequences, alternatives,
// bounded or unbounded repeats) and compiled into a deterministic automaton. The JSON Schema
// and regex front ends (json_schema_language.h, regex_language.h) build these; the token mask
// (token_mask.h) walks the automaton.
//
// Pieces are immutable and may be shared: a language built as a DAG (the optional properties
// of an object share their suffixes) compiles to an automaton linear in the DAG, not in its
// unfolded tree.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::structured {

struct Lang;
using LangPtr = std::shared_ptr<const Lang>;

struct Lang {
  enum class Kind { Bytes, Seq, Alt, Repeat };
  Kind kind = Kind::Seq;
  std::bitset<256> bytes;  // Bytes: one byte of this set
  std::vector<LangPtr> parts;
  int min = 0, max = -1;  // Repeat of parts[0]: at least min, at most max (-1: no limit)
};

LangPtr byte_set(const std::bitset<256>& set);
LangPtr byte_range(uint8_t lo, uint8_t hi);
LangPtr literal(std::string_view bytes);  // exactly these bytes ("" is the empty string)
LangPtr seq(std::vector<LangPtr> parts);
LangPtr alt(std::vector<LangPtr> parts);  // no parts: the empty language (matches nothing)
LangPtr repeat(LangPtr part, int min, int max);
inline LangPtr optional(LangPtr part) {
  return repeat(std::move(part), 0, 1);
}
inline LangPtr star(LangPtr part) {
  return repeat(std::move(part), 0, -1);
}

// The UTF-8 encodings of the code points in [lo, hi] (surrogates D800-DFFF excluded).
LangPtr utf8_range(uint32_t lo, uint32_t hi);
// The UTF-8 encodings of a set of code point ranges, each [lo, hi].
LangPtr utf8_ranges(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

// A language too large to compile within the state limit.
class LanguageTooLarge : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A deterministic automaton over bytes. State 0 is the start; kDead is the state no input
// leaves. Transitions are stored per byte class (bytes no piece tells apart share a column).
class ByteDfa {
 public:
  static constexpr int32_t kDead = -1;

  // Throws LanguageTooLarge when the automaton would pass `max_states` states.
  static ByteDfa compile(const LangPtr& lang, int max_states);

  int32_t next(int32_t state, uint8_t byte) const {
    return table_[size_t(state) * classes_ + class_of_[byte]];
  }
  // The state after `bytes` from `state`, kDead when they leave the language.
  int32_t walk(int32_t state, std::string_view bytes) const;
  bool accepting(int32_t state) const { return accepting_[size_t(state)]; }
  int states() const { return int(accepting_.size()); }
  bool matches(std::string_view bytes) const;  // the whole of `bytes`, from the start state

 private:
  int classes_ = 0;
  uint8_t class_of_[256] = {};
  std::vector<int32_t> table_;
  std::vector<bool> accepting_;
};

}  // namespace hearth::structured
