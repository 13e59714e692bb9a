// The server's memory budget per KV device (issue 26): one MemoryBudget per tensor-parallel
// rank, since rank r's KV must live beside rank r's weights: on its own GPU (vmm), or on a memfd
// server in a budget of its own, so that the CPU engine and CI take the same path. Device d's
// budget holds rank d's weights and the KV chunks leased on it; each client's guaranteed minimum
// is kept per device. A server of one rank has device 0 only, its budget as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "weight-server/daemon/memory_budget.h"

namespace hearth {

class KvDeviceBudgets {
 public:
  using ClientId = MemoryBudget::ClientId;

  // One budget per entry of `device_bytes` (its memory), each `fraction` of it. `gpus[d]` is
  // device d's CUDA ordinal on the server (vmm), or empty for host memory (memfd). Throws
  // std::runtime_error as MemoryBudget does, or when there is no device.
  KvDeviceBudgets(const std::vector<uint64_t>& device_bytes, double fraction,
                  std::vector<int> gpus = {});

  size_t size() const { return budgets_.size(); }
  MemoryBudget& at(size_t device) { return budgets_.at(device); }
  const MemoryBudget& at(size_t device) const { return budgets_.at(device); }
  // Device d's GPU on the server; -1 for host memory.
  int gpu(size_t device) const { return gpus_.empty() ? -1 : gpus_.at(device); }

  // The client's connection closed: every device takes back what it held.
  void forget(ClientId client);
  uint64_t held_by(ClientId client) const;
  // [{"device": d, "gpu": ordinal (vmm only), ...MemoryBudget::to_json()}], by device.
  nlohmann::json to_json() const;

 private:
  std::vector<MemoryBudget> budgets_;
  std::vector<int> gpus_;
};

}  // namespace hearth
