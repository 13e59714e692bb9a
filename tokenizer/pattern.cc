#include "pattern.h"

#include <algorithm>

#include "config.h"
#include "utf8.h"

namespace hearth::tok {

Pattern Pattern::from_json(const Json& j, const std::string& where) {
  if (!j.is_object() || j.size() != 1) {
    config_error(where, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  Pattern p;
  if (j.contains("String")) {
    const Json& s = j.at("String");
    if (!s.is_string()) config_error(where + ".String", "expected a string");
    p.literal_ = s.get<std::string>();
    // An empty literal would match between every pair of characters; no real file uses one.
    if (p.literal_.empty()) config_error(where + ".String", "empty pattern");
    return p;
  }
  if (j.contains("Regex")) {
    const Json& r = j.at("Regex");
    if (!r.is_string()) config_error(where + ".Regex", "expected a string");
    try {
      p.regex_.emplace(r.get<std::string>());
    } catch (const std::runtime_error& e) {
      config_error(where + ".Regex", e.what());
    }
    return p;
  }
  config_error(where,
               "expected {\"String\": ...} or {\"Regex\": ...}, got key '" + j.begin().key() + "'");
}

std::string Pattern::replace_all(std::string_view subject, std::string_view content) const {
  std::string out;
  out.reserve(subject.size());
  size_t last = 0;
  for_each_match(subject, [&](size_t begin, size_t end) {
    out.append(subject.substr(last, begin - last));
    out.append(content);
    last = end;
  });
  out.append(subject.substr(last));
  return out;
}

std::optional<uint32_t> Pattern::single_char() const {
  if (regex_ || literal_.empty()) return std::nullopt;
  size_t len = 0;
  const uint32_t cp = utf8_decode(literal_, 0, &len);
  if (len != literal_.size()) return std::nullopt;
  return cp;
}

SplitBehavior split_behavior_from_json(const Json& j, const std::string& where) {
  if (!j.is_string()) config_error(where, "expected a string");
  const std::string s = j.get<std::string>();
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  config_error(where, "behavior '" + s +
                          "' is not supported (supported: Removed, Isolated, MergedWithPrevious, "
                          "MergedWithNext, Contiguous)");
}

void apply_split_behavior(const std::vector<Segment>& segments, SplitBehavior behavior,
                          std::vector<std::pair<size_t, size_t>>& pieces) {
  pieces.clear();
  auto keep = [&](size_t b, size_t e) { pieces.emplace_back(b, e); };
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.match) keep(s.begin, s.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) keep(s.begin, s.end);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      // A delimiter joins the piece before it, unless that piece was itself a delimiter.
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.match && !previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          keep(s.begin, s.end);
        }
        previous_match = s.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // Mirror image, decided right to left: a delimiter joins the piece after it unless that
      // piece was itself a delimiter.
      bool next_match = false;
      for (size_t k = segments.size(); k-- > 0;) {
        const Segment& s = segments[k];
        if (s.match && !next_match && !pieces.empty()) {
          pieces.back().first = s.begin;
        } else {
          keep(s.begin, s.end);
        }
        next_match = s.match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.match == previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          keep(s.begin, s.end);
        }
        previous_match = s.match;
      }
      break;
    }
  }
  std::erase_if(pieces, [](const auto& p) { return p.first == p.second; });
}

}  // namespace hearth::tok
