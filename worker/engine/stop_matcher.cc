#include "worker/engine/stop_matcher.h"

#include <algorithm>

namespace hearth {

std::string StopMatcher::append(const std::string& piece) {
  if (matched_) return {};  // the text ended at the stop string
  const size_t search_from = text_.size();
  text_ += piece;
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    // A match must end in the new piece: start far enough back to catch one that straddles.
    const size_t from = search_from >= s.size() ? search_from - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    matched_ = true;
    return release(cut);
  }
  return release(text_.size() - held_suffix());
}

std::string StopMatcher::flush() {
  return matched_ ? std::string() : release(text_.size());
}

// Length of the longest suffix of the text that could still grow into a stop string.
size_t StopMatcher::held_suffix() const {
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t len = std::min(s.size() - 1, text_.size()); len > hold; --len)
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  return hold;
}

std::string StopMatcher::release(size_t upto) {
  if (upto <= shown_) return {};
  std::string out = text_.substr(shown_, upto - shown_);
  shown_ = upto;
  return out;
}

}  // namespace hearth
