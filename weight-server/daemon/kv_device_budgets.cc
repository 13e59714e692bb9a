#include "weight-server/daemon/kv_device_budgets.h"

#include <stdexcept>

namespace hearth {

KvDeviceBudgets::KvDeviceBudgets(const std::vector<uint64_t>& device_bytes, double fraction,
                                 std::vector<int> gpus)
    : gpus_(std::move(gpus)) {
  if (device_bytes.empty()) throw std::runtime_error("a memory budget needs a device");
  if (!gpus_.empty() && gpus_.size() != device_bytes.size())
    throw std::logic_error("one GPU per KV device, or none");
  budgets_.reserve(device_bytes.size());
  for (uint64_t bytes : device_bytes) budgets_.emplace_back(bytes, fraction);
}

void KvDeviceBudgets::forget(ClientId client) {
  for (MemoryBudget& budget : budgets_) budget.forget(client);
}

uint64_t KvDeviceBudgets::held_by(ClientId client) const {
  uint64_t bytes = 0;
  for (const MemoryBudget& budget : budgets_) bytes += budget.held_by(client);
  return bytes;
}

nlohmann::json KvDeviceBudgets::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (size_t d = 0; d < budgets_.size(); ++d) {
    nlohmann::json entry = budgets_[d].to_json();
    entry["device"] = d;
    if (gpu(d) >= 0) entry["gpu"] = gpu(d);
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace hearth
