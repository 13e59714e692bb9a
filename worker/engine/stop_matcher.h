// Watches a request's decoded text for its stop strings: what may be shown so far, and where a
// stop string first appears. Text that could still grow into a stop string is held back, so a
// reader never sees part of one.
#pragma once

#include <string>
#include <vector>

namespace hearth {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends `piece`; returns the newly showable text. Sets matched() once a stop string
  // appears; the text is then cut before it and nothing more is shown.
  std::string append(const std::string& piece);
  // Releases everything held back (nothing once a stop string matched).
  std::string flush();
  bool matched() const { return matched_; }

 private:
  size_t held_suffix() const;
  std::string release(size_t upto);

  std::vector<std::string> stops_;
  std::string text_;
  size_t shown_ = 0;
  bool matched_ = false;
};

}  // namespace hearth
