#include "worker/engine/structured/regex_language.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace hearth::structured {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : normalized(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};

class Parser {
 public:
  explicit Parser(std::string_view p) {
    // Code points of the pattern; not UTF-8 is refused.
    for (size_t i = 0; i < p.size();) {
      const uint8_t b = uint8_t(p[i]);
      const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
      if (n == 0 || i + size_t(n) > p.size()) fail_at(i, "the pattern is not valid UTF-8");
      uint32_t cp = n == 1 ? b : b & (0x7F >> n);
      for (int k = 1; k < n; ++k) {
        const uint8_t c = uint8_t(p[i + size_t(k)]);
        if ((c & 0xC0) != 0x80) fail_at(i, "the pattern is not valid UTF-8");
        cp = cp << 6 | (c & 0x3F);
      }
      cps_.push_back(cp);
      offsets_.push_back(i);
      i += size_t(n);
    }
    offsets_.push_back(p.size());
  }

  LangPtr parse() {
    if (at('^')) ++pos_;
    LangPtr l = alternation();
    if (pos_ < cps_.size()) fail("unbalanced ')'");
    return l;
  }

 private:
  [[noreturn]] static void fail_at(size_t offset, const std::string& why) {
    throw RegexError("regex at byte " + std::to_string(offset) + ": " + why);
  }
  [[noreturn]] void fail(const std::string& why) const {
    fail_at(offsets_[std::min(pos_, cps_.size())], why);
  }
  bool at(uint32_t c) const { return pos_ < cps_.size() && cps_[pos_] == c; }
  bool done() const { return pos_ >= cps_.size(); }

  LangPtr alternation() {
    std::vector<LangPtr> parts{sequence()};
    while (at('|')) {
      ++pos_;
      parts.push_back(sequence());
    }
    return alt(std::move(parts));
  }

  LangPtr sequence() {
    std::vector<LangPtr> parts;
    while (!done() && !at('|') && !at(')')) {
      if (at('$') && pos_ + 1 == cps_.size()) {  // a trailing $: the end, as always
        ++pos_;
        break;
      }
      parts.push_back(quantified(atom()));
    }
    return parts.empty() ? literal("") : seq(std::move(parts));
  }

  int number() {
    if (done() || cps_[pos_] < '0' || cps_[pos_] > '9') fail("expected a number");
    int64_t v = 0;
    while (!done() && cps_[pos_] >= '0' && cps_[pos_] <= '9') {
      v = v * 10 + (cps_[pos_++] - '0');
      if (v > kMaxRegexRepeat)
        fail("repeat counts above " + std::to_string(kMaxRegexRepeat) + " are not supported");
    }
    return int(v);
  }

  LangPtr quantified(LangPtr a) {
    for (;;) {
      int min, max;
      if (at('*')) {
        min = 0, max = -1, ++pos_;
      } else if (at('+')) {
        min = 1, max = -1, ++pos_;
      } else if (at('?')) {
        min = 0, max = 1, ++pos_;
      } else if (at('{')) {
        ++pos_;
        min = number();
        max = min;
        if (at(',')) {
          ++pos_;
          max = at('}') ? -1 : number();
        }
        if (!at('}')) fail("expected '}'");
        ++pos_;
        if (max >= 0 && max < min) fail("a repeat's maximum is below its minimum");
      } else {
        return a;
      }
      if (at('?') || at('+')) fail("lazy and possessive quantifiers are not supported");
      a = repeat(std::move(a), min, max);
    }
  }

  LangPtr atom() {
    const uint32_t c = cps_[pos_];
    switch (c) {
      case '(': {
        if (++depth_ > kMaxRegexGroupDepth)
          fail("groups nested deeper than " + std::to_string(kMaxRegexGroupDepth));
        ++pos_;
        if (at('?')) {
          if (pos_ + 1 < cps_.size() && cps_[pos_ + 1] == ':')
            pos_ += 2;
          else
            fail("only (?: ) groups are supported (no lookaround, named groups or flags)");
        }
        LangPtr inner = alternation();
        if (!at(')')) fail("expected ')'");
        ++pos_;
        --depth_;
        return inner;
      }
      case '[':
        return utf8_ranges(char_class());
      case '.':
        ++pos_;
        return utf8_ranges(complement({{'\n', '\n'}}));
      case '\\':
        return utf8_ranges(escape());
      case '^':
      case '$':
        fail("anchors are supported only at the pattern's start and end");
      case '*':
      case '+':
      case '?':
      case '{':
        fail("a quantifier with nothing to repeat");
      default:
        ++pos_;
        return utf8_range(c, c);
    }
  }

  // After a backslash: the code points it stands for.
  Ranges escape() {
    ++pos_;
    if (done()) fail("a pattern cannot end with a backslash");
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case 'd':
        return kDigit;
      case 'D':
        return complement(kDigit);
      case 'w':
        return kWord;
      case 'W':
        return complement(kWord);
      case 's':
        return kSpace;
      case 'S':
        return complement(kSpace);
      case 'n':
        return {{'\n', '\n'}};
      case 'r':
        return {{'\r', '\r'}};
      case 't':
        return {{'\t', '\t'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case '0':
        return {{0, 0}};
      default:
        break;
    }
    const bool punctuation =
        c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
    if (!punctuation) {
      --pos_;
      fail(std::string("the escape \\") + char(c) + " is not supported");
    }
    return {{c, c}};
  }

  Ranges char_class() {
    ++pos_;  // '['
    bool negate = false;
    if (at('^')) negate = true, ++pos_;
    Ranges r;
    bool first = true;
    while (!done() && (!at(']') || first)) {
      first = false;
      Ranges item;
      uint32_t lo;
      if (at('\\')) {
        item = escape();
      } else {
        if (at('[')) fail("nested classes and [: :] are not supported");
        item = {{cps_[pos_], cps_[pos_]}};
        ++pos_;
      }
      if (item.size() == 1 && item[0].first == item[0].second && at('-') &&
          pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        lo = item[0].first;
        ++pos_;
        Ranges hi_item;
        if (at('\\'))
          hi_item = escape();
        else
          hi_item = {{cps_[pos_], cps_[pos_]}}, ++pos_;
        if (hi_item.size() != 1 || hi_item[0].first != hi_item[0].second)
          fail("a class range must end in one character");
        if (hi_item[0].first < lo) fail("a class range runs backwards");
        item = {{lo, hi_item[0].first}};
      }
      r.insert(r.end(), item.begin(), item.end());
    }
    if (!at(']')) fail("an unterminated character class");
    ++pos_;
    return negate ? complement(r) : normalized(r);
  }

  std::vector<uint32_t> cps_;
  std::vector<size_t> offsets_;
  size_t pos_ = 0;
  int depth_ = 0;  // groups open
};

}  // namespace

LangPtr regex_language(std::string_view pattern) {
  return Parser(pattern).parse();
}

}  // namespace hearth::structured
