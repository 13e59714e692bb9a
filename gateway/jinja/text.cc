#include "gateway/jinja/text.h"

#include <algorithm>

#include "base/hex_digits.h"

namespace hearth::jinja::text {

char32_t decode(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) -> unsigned {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) & 0x3Fu : 0u;
  };
  if (b0 < 0x80) {
    i += 1;
    return b0;
  }
  if ((b0 & 0xE0) == 0xC0 && i + 1 < s.size()) {
    char32_t cp = ((b0 & 0x1Fu) << 6) | cont(1);
    i += 2;
    return cp;
  }
  if ((b0 & 0xF0) == 0xE0 && i + 2 < s.size()) {
    char32_t cp = ((b0 & 0x0Fu) << 12) | (cont(1) << 6) | cont(2);
    i += 3;
    return cp;
  }
  if ((b0 & 0xF8) == 0xF0 && i + 3 < s.size()) {
    char32_t cp = ((b0 & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    i += 4;
    return cp;
  }
  i += 1;
  return b0;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(decode(s, i));
  return out;
}

std::string from_code_points(const char32_t* begin, const char32_t* end) {
  std::string out;
  out.reserve(static_cast<size_t>(end - begin));
  for (const char32_t* p = begin; p != end; ++p) append_utf8(out, *p);
  return out;
}

bool is_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_word(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  if (is_space(cp) || !is_printable(cp)) return false;
  // Latin-1 punctuation and symbols, general punctuation, CJK punctuation, symbol blocks.
  if ((cp >= 0xA1 && cp <= 0xBF && cp != 0xAA && cp != 0xB2 && cp != 0xB3 && cp != 0xB5 &&
       cp != 0xB9 && cp != 0xBA && cp != 0xBC && cp != 0xBD && cp != 0xBE) ||
      cp == 0xD7 || cp == 0xF7 || (cp >= 0x2000 && cp <= 0x2BFF) ||
      (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFE30 && cp <= 0xFE4F) ||
      (cp >= 0xFF00 && cp <= 0xFF0F) || (cp >= 0x1F000 && cp <= 0x1FAFF)) {
    return false;
  }
  return true;
}

bool is_printable(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp < 0x600) return true;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x1680 ||
      cp == 0x180E || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || (cp >= 0xD800 && cp <= 0xF8FF) ||
      cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF ||
      (cp >= 0xE0000 && cp <= 0xE0FFF) || cp >= 0xF0000) {
    return false;
  }
  return true;
}

namespace {

bool in_chars(char32_t cp, const std::vector<char32_t>& set) {
  return std::find(set.begin(), set.end(), cp) != set.end();
}

}  // namespace

std::string strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars != nullptr) set = code_points(*chars);
  auto strip_it = [&](char32_t cp) { return chars == nullptr ? is_space(cp) : in_chars(cp, set); };
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!strip_it(decode(s, next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t next = start;
      if (!strip_it(decode(s, next))) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    // Skip a run of whitespace.
    size_t word = i;
    while (word < s.size()) {
      size_t next = word;
      if (!is_space(decode(s, next))) break;
      word = next;
    }
    if (word >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // The rest, with trailing whitespace removed, is the last piece.
      out.push_back(strip(s.substr(word), nullptr, false, true));
      return out;
    }
    size_t end = word;
    while (end < s.size()) {
      size_t next = end;
      if (is_space(decode(s, next))) break;
      end = next;
    }
    out.emplace_back(s.substr(word, end - word));
    i = end;
  }
  return out;
}

std::vector<std::string> split(std::string_view s, std::string_view sep, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t hit = s.find(sep, start);
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(start, hit - start));
    start = hit + sep.size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::vector<std::string> rsplit(std::string_view s, std::string_view sep, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep.size()) break;
    const size_t hit = s.rfind(sep, end - sep.size());
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(hit + sep.size(), end - hit - sep.size()));
    end = hit;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    const size_t at = i;
    const char32_t cp = decode(s, i);
    const bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                     cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!brk) continue;
    out.emplace_back(s.substr(start, at - start));
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    start = i;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `with` before every code point and at the end, up to count times.
    int64_t done = 0;
    size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || done < count) {
        out.append(with);
        ++done;
      }
      if (i == s.size()) break;
      const size_t at = i;
      decode(s, i);
      out.append(s.substr(at, i - at));
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, start);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(start, hit - start));
    out.append(with);
    start = hit + old.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

namespace {

// Simple case mapping (one code point to one) for Latin, Greek, Cyrillic and fullwidth
// Latin, which covers what chat templates case-map; other scripts are left as they are.
// Pairs where upper and lower differ by a fixed offset:
struct CaseRange {
  char32_t upper_first, upper_last;
  int32_t to_lower;  // lower = upper + to_lower
};
constexpr CaseRange kOffsetRanges[] = {
    {'A', 'Z', 32},     {0xC0, 0xD6, 32},     {0xD8, 0xDE, 32},   {0x391, 0x3A1, 32},
    {0x3A3, 0x3AB, 32}, {0x388, 0x38A, 37},   {0x410, 0x42F, 32}, {0x400, 0x40F, 80},
    {0x531, 0x556, 48}, {0xFF21, 0xFF3A, 32},
};
// Blocks where an even code point is upper case and the next one its lower case (or, for
// odd_upper, the other way round).
struct AlternatingRange {
  char32_t first, last;
  bool odd_upper;
};
constexpr AlternatingRange kAlternating[] = {
    {0x100, 0x12F, false}, {0x132, 0x137, false}, {0x139, 0x148, true},    {0x14A, 0x177, false},
    {0x179, 0x17E, true},  {0x3D8, 0x3EF, false}, {0x460, 0x481, false},   {0x48A, 0x4BF, false},
    {0x4C1, 0x4CE, true},  {0x4D0, 0x52F, false}, {0x1E00, 0x1E95, false}, {0x1EA0, 0x1EFF, false},
};
// Irregular pairs (upper, lower).
constexpr std::pair<char32_t, char32_t> kPairs[] = {
    {0x178, 0xFF}, {0x386, 0x3AC}, {0x38C, 0x3CC}, {0x38E, 0x3CD}, {0x38F, 0x3CE},
};

char32_t to_lower_cp(char32_t cp) {
  for (const auto& r : kOffsetRanges) {
    if (cp >= r.upper_first && cp <= r.upper_last) return cp + static_cast<char32_t>(r.to_lower);
  }
  for (const auto& r : kAlternating) {
    if (cp >= r.first && cp <= r.last && (cp % 2 == 1) == r.odd_upper) return cp + 1;
  }
  for (const auto& [u, l] : kPairs) {
    if (cp == u) return l;
  }
  return cp;
}

char32_t to_upper_cp(char32_t cp) {
  if (cp == 0xB5) return 0x39C;   // micro sign
  if (cp == 0x131) return 'I';    // dotless i
  if (cp == 0x17F) return 'S';    // long s
  if (cp == 0x3C2) return 0x3A3;  // final sigma
  for (const auto& r : kOffsetRanges) {
    const char32_t lo = r.upper_first + static_cast<char32_t>(r.to_lower);
    const char32_t hi = r.upper_last + static_cast<char32_t>(r.to_lower);
    if (cp >= lo && cp <= hi) return cp - static_cast<char32_t>(r.to_lower);
  }
  for (const auto& r : kAlternating) {
    if (cp >= r.first && cp <= r.last && (cp % 2 == 1) != r.odd_upper) return cp - 1;
  }
  for (const auto& [u, l] : kPairs) {
    if (cp == l) return u;
  }
  return cp;
}

bool cased_upper(char32_t cp) {
  return to_lower_cp(cp) != cp;
}
bool cased_lower(char32_t cp) {
  return to_upper_cp(cp) != cp || cp == 0xDF;
}

void append_upper(std::string& out, char32_t cp) {
  if (cp == 0xDF) {
    out.append("SS");  // Python: 'ß'.upper() == 'SS'
  } else {
    append_utf8(out, to_upper_cp(cp));
  }
}

}  // namespace

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(out, decode(s, i));
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_utf8(out, to_lower_cp(decode(s, i)));
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const bool first = i == 0;
    const char32_t cp = decode(s, i);
    if (first) {
      append_upper(out, cp);
    } else {
      append_utf8(out, to_lower_cp(cp));
    }
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = decode(s, i);
    const bool cased = cased_upper(cp) || cased_lower(cp);
    if (!cased) {
      append_utf8(out, cp);
    } else if (previous_cased) {
      append_utf8(out, to_lower_cp(cp));
    } else {
      append_upper(out, cp);
    }
    previous_cased = cased;
  }
  return out;
}

bool is_lower(std::string_view s) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = decode(s, i);
    if (cased_upper(cp)) return false;
    any = any || cased_lower(cp);
  }
  return any;
}

bool is_upper(std::string_view s) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = decode(s, i);
    if (cased_lower(cp)) return false;
    any = any || cased_upper(cp);
  }
  return any;
}

std::string py_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t cp = decode(s, i);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out.append("\\n");
    } else if (cp == '\r') {
      out.append("\\r");
    } else if (cp == '\t') {
      out.append("\\t");
    } else if (is_printable(cp)) {
      out.append(s.substr(at, i - at));
    } else {
      int digits = cp < 0x100 ? 2 : cp < 0x10000 ? 4 : 8;
      out.push_back('\\');
      out.push_back(digits == 2 ? 'x' : digits == 4 ? 'u' : 'U');
      append_hex(out, cp, digits);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace hearth::jinja::text
