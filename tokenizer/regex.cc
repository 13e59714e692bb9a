#include "regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

#include "utf8.h"

namespace hearth::tok {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread matching state: compiled patterns are shared, match data and the JIT stack are
// not. One ovector pair suffices because only the whole match is used.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);

  ThreadMatchState() {
    if (data == nullptr || context == nullptr || jit_stack == nullptr) {
      throw std::bad_alloc();
    }
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

// Members of Oniguruma's Unicode \s (tab..CR, NEL and the Z categories), spelled out: PCRE2's
// \s also matches U+180E, which Oniguruma does not.
constexpr std::string_view kSpaceMembers =
    R"(\t\n\x0B\f\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
// Members of Oniguruma's Unicode \w (letters, marks, numbers, connector punctuation); PCRE2's
// \w lacks the marks and most connectors.
constexpr std::string_view kWordMembers = R"(\p{L}\p{M}\p{N}\p{Pc})";

// Rewrites the escapes whose meaning differs between Oniguruma (which tokenizer.json patterns
// are written for, via HF's Rust bindings) and PCRE2. Everything else has the same syntax and
// meaning in both for the patterns tokenizers use.
std::string translate_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[++i];
      if (d == 'Q') {  // quoted literal text up to \E: copy untouched
        const size_t end = p.find("\\E", i + 1);
        const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out.append(p.substr(i - 1, stop - (i - 1)));
        i = stop - 1;
        continue;
      }
      const bool in_class = class_depth > 0;
      if (d == 's' || d == 'w') {
        const std::string_view members = d == 's' ? kSpaceMembers : kWordMembers;
        if (in_class) {
          out.append(members);
        } else {
          out.append("[").append(members).append("]");
        }
      } else if ((d == 'S' || d == 'W') && !in_class) {
        out.append("[^").append(d == 'S' ? kSpaceMembers : kWordMembers).append("]");
      } else {
        // Inside a class a negated shorthand cannot be spelled as members; it keeps PCRE2's
        // meaning (which differs only at a handful of characters).
        out.push_back(c);
        out.push_back(d);
      }
      continue;
    }
    if (c == '[') {
      if (class_depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX [:alpha:]
        const size_t end = p.find(":]", i + 2);
        if (end != std::string_view::npos) {
          out.append(p.substr(i, end + 2 - i));
          i = end + 1;
          continue;
        }
      }
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  const std::string translated = translate_oniguruma(pattern);
  // MULTILINE: in Oniguruma's default (Ruby) syntax ^ and $ match at every line boundary.
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, nullptr);
  if (code->code == nullptr) {
    throw std::runtime_error("invalid regex '" + pattern_ + "' (as PCRE2: '" + translated +
                             "', offset " + std::to_string(offset) + "): " + pcre2_message(error));
  }
  // JIT is an optimisation only: without it (unsupported CPU, no executable memory) the
  // interpreter gives the same matches.
  code->jit = pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE) == 0;
  code_ = std::move(code);
}

bool Regex::find(std::string_view subject, size_t start, size_t* begin, size_t* end) const {
  ThreadMatchState& state = thread_state();
  // The whole subject was validated once up front; letting PCRE2 re-check it on every call
  // from a moving start offset would make splitting quadratic.
  int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(),
                       start, PCRE2_NO_UTF_CHECK, state.data, state.context);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT ||
      rc == PCRE2_ERROR_HEAPLIMIT) {
    // Pathological input for the JIT stack: retry in the interpreter with generous limits.
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    pcre2_set_heap_limit(context, 1u << 30);
    pcre2_set_match_limit(context, ~0u);
    rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(),
                     start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, state.data, context);
    pcre2_match_context_free(context);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    throw std::runtime_error("regex '" + pattern_ + "' failed: " + pcre2_message(rc));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  *begin = ovector[0];
  *end = ovector[1];
  return true;
}

size_t Regex::next_char(std::string_view s, size_t pos) {
  if (pos >= s.size()) return pos + 1;
  return pos + utf8_len(static_cast<unsigned char>(s[pos]));
}

}  // namespace hearth::tok
