// The `pattern` of Split, Replace (normalizer and decoder): either {"String": literal} or
// {"Regex": pcre}, with one way to enumerate matches; plus the split-delimiter behaviours.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "regex.h"

namespace hearth::tok {

class Pattern {
 public:
  // `where` names the JSON location for error messages.
  static Pattern from_json(const nlohmann::json& j, const std::string& where);

  // Matches left to right without overlap. Empty text has no matches at all, even for a
  // pattern that matches the empty string (the reference returns early there too).
  template <typename Fn>
  void for_each_match(std::string_view subject, Fn&& fn) const {
    if (subject.empty()) return;
    if (regex_) {
      regex_->for_each_match(subject, fn);
      return;
    }
    for (size_t pos = subject.find(literal_); pos != std::string_view::npos;
         pos = subject.find(literal_, pos + literal_.size())) {
      fn(pos, pos + literal_.size());
    }
  }

  // Replaces every match by `content`.
  std::string replace_all(std::string_view subject, std::string_view content) const;

  // A literal of exactly one character, which allows replacing inside a partial token.
  std::optional<uint32_t> single_char() const;

 private:
  std::string literal_;
  std::optional<Regex> regex_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior split_behavior_from_json(const nlohmann::json& j, const std::string& where);

// A byte range of the text being split and whether it is a delimiter ("match").
struct Segment {
  size_t begin;
  size_t end;
  bool match;
};

// Turns the alternating segments covering a text into the pieces to keep, applying the
// delimiter behaviour exactly as the reference does (including how runs of consecutive
// delimiters merge). Empty pieces are dropped.
void apply_split_behavior(const std::vector<Segment>& segments, SplitBehavior behavior,
                          std::vector<std::pair<size_t, size_t>>& pieces);

}  // namespace hearth::tok
