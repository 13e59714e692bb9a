// A regular expression to a regular language over bytes (guided_regex). The whole output must
// match: a leading ^ and a trailing $ are allowed and change nothing.
//
// Supported: literal characters (UTF-8), . (any character but newline), classes [a-z0-9_]
// and [^...], the escapes \d \w \s \D \W \S \n \r \t \f \v \0 and escaped punctuation,
// groups ( ) and (?: ), alternation |, and the quantifiers * + ? {n} {n,} {n,m} (a trailing ?
// for laziness is refused: it means nothing for a whole-output match). Anything else
// (backreferences, lookaround, anchors inside, \b, named groups) is refused with RegexError
// naming it and its offset.
#pragma once

#include <stdexcept>
#include <string_view>

#include "worker/engine/structured/byte_language.h"

namespace hearth::structured {

class RegexError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Repeat counts beyond this are refused (the automaton grows with them).
inline constexpr int kMaxRegexRepeat = 1000;
// Groups nested deeper than this are refused (the parser and compiler recurse on them).
inline constexpr int kMaxRegexGroupDepth = 64;

LangPtr regex_language(std::string_view pattern);

}  // namespace hearth::structured
