#include "gateway/admission.h"

#include <string>

#include "gateway/api_error.h"

namespace hearth::gateway {

namespace {

// Gives its place back when destroyed.
class Ticket {
 public:
  explicit Ticket(std::atomic<int>& count) : count_(count) {}
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;
  ~Ticket() { --count_; }

 private:
  std::atomic<int>& count_;
};

}  // namespace

std::shared_ptr<const void> Admission::admit() {
  if (++in_flight_ > max_in_flight_) {
    --in_flight_;
    throw ApiError(
        429, "rate_limit_error",
        "too many requests in flight (" + std::to_string(max_in_flight_) + "); retry shortly", "",
        1);
  }
  return std::make_shared<Ticket>(in_flight_);
}

}  // namespace hearth::gateway
