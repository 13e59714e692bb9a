#include "weight-server/daemon/memory_budget.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hearth {

MemoryBudget::MemoryBudget(uint64_t device_bytes, double fraction)
    : device_bytes_(device_bytes), fraction_(fraction) {
  if (!(fraction > 0 && fraction <= 1))
    throw std::runtime_error("the GPU memory fraction must be in (0, 1], got " +
                             std::to_string(fraction));
  if (device_bytes == 0) throw std::runtime_error("a device of 0 bytes has nothing to budget");
  limit_ = uint64_t(double(device_bytes) * fraction);
}

uint64_t MemoryBudget::free_bytes() const {
  const uint64_t used = weights_ + kv_;
  return used >= limit_ ? 0 : limit_ - used;
}

uint64_t MemoryBudget::reserved_for_others(ClientId client) const {
  uint64_t reserved = 0;
  for (const auto& [id, h] : clients_)
    if (id != client && h.minimum > h.bytes) reserved += h.minimum - h.bytes;
  return reserved;
}

uint64_t MemoryBudget::grantable(ClientId client, uint64_t chunk_bytes, uint64_t want,
                                 uint64_t min_bytes) {
  if (chunk_bytes == 0) return 0;
  Holding& h = clients_[client];
  // A minimum is kept only while the budget could ever meet it beside the weights and the other
  // minimums; a later, larger claim does not take back what others were promised.
  const uint64_t others = reserved_for_others(client);
  const uint64_t room = limit_ > weights_ + others ? limit_ - weights_ - others : 0;
  h.minimum = std::max(h.minimum, std::min(min_bytes, room));
  const uint64_t free = free_bytes();
  const uint64_t available = free > others ? free - others : 0;
  return std::min(want, available / chunk_bytes);
}

void MemoryBudget::add(ClientId client, uint64_t bytes) {
  clients_[client].bytes += bytes;
  kv_ += bytes;
}

void MemoryBudget::remove(ClientId client, uint64_t bytes) {
  const auto it = clients_.find(client);
  if (it == clients_.end() || it->second.bytes < bytes)
    throw std::logic_error("the memory budget returns more than the client holds");
  it->second.bytes -= bytes;
  kv_ -= bytes;
}

void MemoryBudget::forget(ClientId client) {
  const auto it = clients_.find(client);
  if (it == clients_.end()) return;
  kv_ -= it->second.bytes;
  clients_.erase(it);
}

uint64_t MemoryBudget::held_by(ClientId client) const {
  const auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.bytes;
}

nlohmann::json MemoryBudget::to_json() const {
  return {{"device_bytes", device_bytes_}, {"fraction", fraction_}, {"limit_bytes", limit_},
          {"weights_bytes", weights_},     {"kv_bytes", kv_},       {"free_bytes", free_bytes()}};
}

}  // namespace hearth
