#include "gateway/jinja/lexer.h"

#include <algorithm>
#include <charconv>

#include "base/hex_digits.h"
#include "gateway/jinja/error.h"
#include "gateway/jinja/text.h"

namespace hearth::jinja {
namespace {

[[noreturn]] void syntax(int line, std::string message) {
  throw TemplateError(TemplateError::Kind::kSyntax, line, std::move(message));
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// jinja2 splits the source on \r\n, \r and \n, drops one trailing empty line
// (keep_trailing_newline=False) and joins with \n.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// A string literal's body decoded as Python's "unicode-escape" codec decodes it after jinja2
// has turned non-ASCII characters into backslash escapes.
std::string unescape(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size();) {
    if (body[i] != '\\') {
      const size_t at = i;
      text::decode(body, i);
      out.append(body.substr(at, i - at));
      continue;
    }
    ++i;  // the lexer guarantees a character follows every backslash
    const char c = body[i];
    auto code_point = [&](int digits, char kind) {
      char32_t cp = 0;
      for (int k = 0; k < digits; ++k) {
        const int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
        if (h < 0) {
          syntax(line, std::string("truncated \\") + kind + " escape in a string literal");
        }
        cp = cp * 16 + static_cast<char32_t>(h);
      }
      i += 1 + static_cast<size_t>(digits);
      if (cp > 0x10FFFF) syntax(line, "illegal Unicode character in a string literal");
      if (cp >= 0xD800 && cp <= 0xDFFF) {
        syntax(line, "a string literal escapes a lone surrogate, which cannot be UTF-8");
      }
      text::append_utf8(out, cp);
    };
    switch (c) {
      case '\n':
        ++i;
        break;  // line continuation
      case '\\':
        out.push_back('\\');
        ++i;
        break;
      case '\'':
        out.push_back('\'');
        ++i;
        break;
      case '"':
        out.push_back('"');
        ++i;
        break;
      case 'a':
        out.push_back('\a');
        ++i;
        break;
      case 'b':
        out.push_back('\b');
        ++i;
        break;
      case 'f':
        out.push_back('\f');
        ++i;
        break;
      case 'n':
        out.push_back('\n');
        ++i;
        break;
      case 'r':
        out.push_back('\r');
        ++i;
        break;
      case 't':
        out.push_back('\t');
        ++i;
        break;
      case 'v':
        out.push_back('\v');
        ++i;
        break;
      case 'x':
        code_point(2, 'x');
        break;
      case 'u':
        code_point(4, 'u');
        break;
      case 'U':
        code_point(8, 'U');
        break;
      case 'N':
        throw TemplateError(TemplateError::Kind::kUnsupported, line,
                            "\\N{...} named escapes in string literals are not supported");
      default:
        if (c >= '0' && c <= '7') {
          char32_t cp = 0;
          int n = 0;
          while (n < 3 && i < body.size() && body[i] >= '0' && body[i] <= '7') {
            cp = cp * 8 + static_cast<char32_t>(body[i] - '0');
            ++i;
            ++n;
          }
          text::append_utf8(out, cp);
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          // Python saw the backslash followed by the escape it made of this character.
          const char32_t cp = text::decode(body, i);
          const int digits = cp < 0x100 ? 2 : cp < 0x10000 ? 4 : 8;
          out.push_back('\\');
          out.push_back(digits == 2 ? 'x' : digits == 4 ? 'u' : 'U');
          append_hex(out, cp, digits);
        } else {
          // An unknown escape stays as written.
          out.push_back('\\');
          out.push_back(c);
          ++i;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_opener(pos_);
      if (tag == std::string::npos) {
        emit_data(src_.substr(pos_), line_);
        count_lines(pos_, src_.size());
        pos_ = src_.size();
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')
                            ? src_[tag + 2]
                            : '\0';
      size_t raw_body = 0;
      const bool raw = kind == '%' && match_raw_begin(tag, &raw_body);
      emit_text_before_tag(pos_, tag, sign, /*is_variable=*/kind == '{');
      if (raw) {
        count_lines(tag, raw_body);
        pos_ = raw_body;
        lex_raw_body();
        continue;
      }
      pos_ = tag + 2 + (sign != '\0' ? 1 : 0);
      if (kind == '#') {
        lex_comment(tag);
      } else {
        lex_tag(kind == '{');
      }
    }
    tokens_.push_back(Token{Token::Type::kEof, line_, {}});
    return std::move(tokens_);
  }

 private:
  size_t find_opener(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  void count_lines(size_t begin, size_t end) {
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(begin),
                                         src_.begin() + static_cast<std::ptrdiff_t>(end), '\n'));
  }

  // Python's \s at src_[i]: its length in bytes, 0 when not whitespace.
  size_t space_at(size_t i) const {
    if (i >= src_.size()) return 0;
    size_t next = i;
    return text::is_space(text::decode(src_, next)) ? next - i : 0;
  }

  size_t skip_space(size_t i) const {
    for (size_t n; (n = space_at(i)) > 0;) i += n;
    return i;
  }

  // {%[-+]?\s*raw\s*(-%}\s*|%})  at `tag`; sets *body to where the raw text starts.
  bool match_raw_begin(size_t tag, size_t* body) const {
    size_t i = tag + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = skip_space(i);
    if (src_.compare(i, 3, "raw") != 0) return false;
    i = skip_space(i + 3);
    if (src_.compare(i, 3, "-%}") == 0) {
      *body = skip_space(i + 3);
      return true;
    }
    if (src_.compare(i, 2, "%}") == 0) {
      *body = i + 2;
      return true;
    }
    return false;
  }

  // Applies whitespace control to src_[begin, tag) and emits it.
  void emit_text_before_tag(size_t begin, size_t tag, char sign, bool is_variable) {
    std::string_view text(src_.data() + begin, tag - begin);
    const int line = line_;
    count_lines(begin, tag);
    if (sign == '-') {
      emit_data(text::strip(text, nullptr, false, true), line);
      return;
    }
    if (sign != '+' && !is_variable) {
      // lstrip_blocks: drop spaces between the line start and the tag.
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      const bool line_starting = begin == 0 || src_[begin - 1] == '\n';
      if ((l_pos > 0 || line_starting) && l_pos < text.size() && skip_space(begin + l_pos) == tag) {
        emit_data(text.substr(0, l_pos), line);
        return;
      }
    }
    emit_data(text, line);
  }

  void emit_data(std::string_view text, int line) {
    if (!text.empty()) tokens_.push_back(Token{Token::Type::kData, line, std::string(text)});
  }

  void lex_raw_body() {
    // The first {%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?) ends the raw text.
    for (size_t i = src_.find("{%", pos_); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      const char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : '\0';
      if (sign != '\0') ++j;
      j = skip_space(j);
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j = skip_space(j + 6);
      size_t end;
      if (src_.compare(j, 3, "+%}") == 0) {
        end = j + 3;
      } else if (src_.compare(j, 3, "-%}") == 0) {
        end = skip_space(j + 3);
      } else if (src_.compare(j, 2, "%}") == 0) {
        end = j + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      emit_text_before_tag(pos_, i, sign, false);
      count_lines(i, end);
      pos_ = end;
      return;
    }
    syntax(line_, "missing end of raw directive ({% endraw %})");
  }

  void lex_comment(size_t tag) {
    const int line = line_;
    const size_t hit = src_.find("#}", pos_);
    if (hit == std::string::npos) syntax(line, "missing end of comment tag (#})");
    const char sign =
        hit > pos_ && (src_[hit - 1] == '-' || src_[hit - 1] == '+') ? src_[hit - 1] : '\0';
    size_t end = hit + 2;
    if (sign == '-') {
      end = skip_space(end);
    } else if (sign == '\0' && end < src_.size() && src_[end] == '\n') {
      ++end;  // trim_blocks
    }
    count_lines(tag, end);
    pos_ = end;
  }

  // Inside {{ ... }} or {% ... %}.
  void lex_tag(bool variable) {
    const int begin_line = line_;
    tokens_.push_back(
        Token{variable ? Token::Type::kVariableBegin : Token::Type::kBlockBegin, line_, {}});
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) {
        syntax(begin_line,
               variable ? "unclosed '{{' (missing '}}')" : "unclosed '{%' (missing '%}')");
      }
      if (balance.empty() && lex_tag_end(variable)) return;
      if (const size_t ws = space_at(pos_); ws > 0) {
        const size_t end = skip_space(pos_);
        count_lines(pos_, end);
        pos_ = end;
        continue;
      }
      if (lex_number() || lex_name() || lex_string()) continue;
      lex_operator(balance);
    }
  }

  bool lex_tag_end(bool variable) {
    const char* close = variable ? "}}" : "%}";
    if (!variable && src_.compare(pos_, 3, "+%}") == 0) {
      pos_ += 3;
    } else if (src_.compare(pos_, 1, "-") == 0 && src_.compare(pos_ + 1, 2, close) == 0) {
      const size_t end = skip_space(pos_ + 3);
      count_lines(pos_, end);
      pos_ = end;
    } else if (src_.compare(pos_, 2, close) == 0) {
      pos_ += 2;
      if (!variable && pos_ < src_.size() && src_[pos_] == '\n') {  // trim_blocks
        ++pos_;
        ++line_;
      }
    } else {
      return false;
    }
    tokens_.push_back(
        Token{variable ? Token::Type::kVariableEnd : Token::Type::kBlockEnd, line_, {}});
    return true;
  }

  // (\d+_)*\d+ at i; returns the end, or i when absent.
  size_t digits_at(size_t i) const {
    size_t j = i;
    while (j < src_.size() && is_digit(src_[j])) {
      ++j;
      if (j + 1 < src_.size() && src_[j] == '_' && is_digit(src_[j + 1])) ++j;
    }
    return j;
  }

  bool lex_number() {
    if (!is_digit(src_[pos_])) return false;
    // Float first, as jinja2 tries it first (and not right after a '.', so x.0.1 is items).
    if (pos_ == 0 || src_[pos_ - 1] != '.') {
      const size_t int_end = digits_at(pos_);
      size_t end = 0;
      size_t frac_end = int_end;
      if (frac_end + 1 < src_.size() && src_[frac_end] == '.' && is_digit(src_[frac_end + 1])) {
        frac_end = digits_at(frac_end + 1);
      }
      size_t e = frac_end;
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t k = e + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && is_digit(src_[k])) end = digits_at(k);
      }
      if (end == 0 && frac_end != int_end) end = frac_end;
      if (end != 0) {
        std::string spelled;
        for (size_t k = pos_; k < end; ++k) {
          if (src_[k] != '_') spelled.push_back(src_[k]);
        }
        Token t{Token::Type::kFloat, line_, spelled};
        std::from_chars(spelled.data(), spelled.data() + spelled.size(), t.float_value);
        tokens_.push_back(std::move(t));
        pos_ = end;
        return true;
      }
    }
    // Integers: 0b.., 0o.., 0x.., [1-9](_?\d)*, 0(_?0)*.
    int base = 10;
    size_t start = pos_;
    size_t end = pos_;
    auto run = [&](size_t from, auto accept) {
      size_t j = from;
      while (j < src_.size()) {
        if (accept(src_[j])) {
          ++j;
        } else if (src_[j] == '_' && j + 1 < src_.size() && accept(src_[j + 1])) {
          j += 2;
        } else {
          break;
        }
      }
      return j;
    };
    const char p = pos_ + 1 < src_.size() ? static_cast<char>(src_[pos_ + 1] | 0x20) : '\0';
    if (src_[pos_] == '0' && (p == 'b' || p == 'o' || p == 'x')) {
      base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      auto accept = [base](char c) {
        const int h = hex_value(c);
        return h >= 0 && h < base;
      };
      // The first digit may itself follow an underscore: 0x_ff.
      size_t first = pos_ + 2;
      if (first < src_.size() && src_[first] == '_') ++first;
      if (first < src_.size() && accept(src_[first])) {
        start = first;
        end = run(first, accept);
      }
    }
    if (end == pos_) {
      base = 10;
      start = pos_;
      end = src_[pos_] == '0' ? run(pos_, [](char c) { return c == '0'; })
                              : run(pos_, [](char c) { return is_digit(c); });
    }
    int64_t value = 0;
    for (size_t k = start; k < end; ++k) {
      if (src_[k] == '_') continue;
      if (__builtin_mul_overflow(value, base, &value) ||
          __builtin_add_overflow(value, hex_value(src_[k]), &value)) {
        throw TemplateError(
            TemplateError::Kind::kUnsupported, line_,
            "integer literal '" + src_.substr(pos_, end - pos_) + "' does not fit in 64 bits");
      }
    }
    Token t{Token::Type::kInteger, line_, src_.substr(pos_, end - pos_)};
    t.int_value = value;
    tokens_.push_back(std::move(t));
    pos_ = end;
    return true;
  }

  bool lex_name() {
    if (!is_name_start(src_[pos_])) return false;
    size_t end = pos_;
    while (end < src_.size() && is_name_char(src_[end])) ++end;
    tokens_.push_back(Token{Token::Type::kName, line_, src_.substr(pos_, end - pos_)});
    pos_ = end;
    return true;
  }

  bool lex_string() {
    const char quote = src_[pos_];
    if (quote != '\'' && quote != '"') return false;
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' && i + 1 < src_.size() ? 2 : 1;
    if (i >= src_.size()) syntax(line_, "unterminated string literal");
    const int line = line_;
    std::string value = unescape(std::string_view(src_).substr(pos_ + 1, i - pos_ - 1), line);
    count_lines(pos_, i + 1);
    tokens_.push_back(Token{Token::Type::kString, line, std::move(value)});
    pos_ = i + 1;
    return true;
  }

  void lex_operator(std::vector<char>& balance) {
    static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    static const std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    std::string op;
    for (const char* two : kTwo) {
      if (src_.compare(pos_, 2, two) == 0) op = two;
    }
    if (op.empty() && kOne.find(src_[pos_]) != std::string_view::npos) op = src_[pos_];
    if (op.empty()) {
      size_t next = pos_;
      const char32_t cp = text::decode(src_, next);
      std::string shown;
      text::append_utf8(shown, cp);
      syntax(line_, "unexpected character '" + shown + "' in a tag");
    }
    if (op == "(" || op == "[" || op == "{") {
      balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
    } else if (op == ")" || op == "]" || op == "}") {
      if (balance.empty()) syntax(line_, "unexpected '" + op + "'");
      if (balance.back() != op[0]) {
        syntax(line_, "unexpected '" + op + "', expected '" + std::string(1, balance.back()) + "'");
      }
      balance.pop_back();
    }
    tokens_.push_back(Token{Token::Type::kOperator, line_, op});
    pos_ += op.size();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace hearth::jinja
