// What a tensor-parallel vmm server holds on each of its GPUs (issue 26), for `stats`: the
// weights of every rank placed on a device, against that device's share of the budget
// (--gpu-memory-fraction applies per GPU). Each GPU's KV leases are in the stats' kv_devices
// (kv_device_budgets.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weight-server/sharing/exportable_store.h"

namespace hearth {

// Bytes of `store`'s allocations on `device` (a sharded store's ranks there; an unsharded vmm
// store's whole size when it lives on `device`, found by the caller).
uint64_t sharded_bytes_on(const ExportableStore& store, int device);
// Bytes of rank `rank`'s allocations of a sharded store; 0 for a store that is not sharded.
uint64_t rank_allocation_bytes(const ExportableStore& store, int rank);

// [{"device", "gpu_uuid", "memory_bytes", "limit_bytes", "weights_bytes", "ranks": [[model,
// rank], ...]}] for every GPU a sharded store's rank lives on, by device; `memory_bytes(d)`
// gives a device's size.
nlohmann::json gpu_memory_use(
    const std::vector<std::pair<std::string, const ExportableStore*>>& stores, double fraction,
    const std::function<uint64_t(int)>& memory_bytes);

}  // namespace hearth
