// A compiled PCRE2 pattern (UTF + Unicode properties, JIT) for the pre-tokenizer and
// normalizer patterns of tokenizer.json, iterated the way HF's Oniguruma-based find_iter does.
// Immutable after construction and safe to use from many threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace hearth::tok {

class Regex {
 public:
  // Throws std::runtime_error naming the pattern and PCRE2's complaint.
  explicit Regex(std::string_view pattern);

  // Calls fn(begin, end) for each match in `subject` (valid UTF-8), left to right and without
  // overlap. An empty match directly after the previous match is skipped, as in the reference,
  // so patterns that can match nothing still make progress.
  template <typename Fn>
  void for_each_match(std::string_view subject, Fn&& fn) const {
    size_t pos = 0;
    size_t last_match_end = kNone;
    while (pos <= subject.size()) {
      size_t begin = 0;
      size_t end = 0;
      if (!find(subject, pos, &begin, &end)) return;
      if (begin == end && end == last_match_end) {
        pos = next_char(subject, pos);
        continue;
      }
      fn(begin, end);
      last_match_end = end;
      pos = begin == end ? next_char(subject, end) : end;
    }
  }

  const std::string& pattern() const { return pattern_; }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  bool find(std::string_view subject, size_t start, size_t* begin, size_t* end) const;
  static size_t next_char(std::string_view s, size_t pos);

  struct Code;
  std::string pattern_;
  std::shared_ptr<const Code> code_;
};

}  // namespace hearth::tok
