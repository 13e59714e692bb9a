// How many generation requests the gateway runs at once. A request past the limit is refused
// with 429 (and Retry-After) before any work is spent on it: no body parsing, no tokenizing.
#pragma once

#include <atomic>
#include <memory>

namespace hearth::gateway {

class Admission {
 public:
  explicit Admission(int max_in_flight) : max_in_flight_(max_in_flight) {}
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // A place for one request, given back when the last copy is let go (the handler's, or the
  // stream's once it ends). Throws ApiError 429 when every place is taken.
  std::shared_ptr<const void> admit();

  int in_flight() const { return in_flight_.load(); }

 private:
  const int max_in_flight_;
  std::atomic<int> in_flight_{0};
};

}  // namespace hearth::gateway
