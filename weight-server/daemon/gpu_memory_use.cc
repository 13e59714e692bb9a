#include "weight-server/daemon/gpu_memory_use.h"

#include <map>

namespace hearth {

uint64_t sharded_bytes_on(const ExportableStore& store, int device) {
  const ShardedLayout* sharded = store.sharded();
  if (!sharded) return 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < store.tensors().size(); ++i)
    if (sharded->devices[size_t(sharded->ranks[i])] == device)
      bytes += store.tensors()[i].alloc_bytes;
  return bytes;
}

uint64_t rank_allocation_bytes(const ExportableStore& store, int rank) {
  const ShardedLayout* sharded = store.sharded();
  if (!sharded) return 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < store.tensors().size(); ++i)
    if (sharded->ranks[i] == rank) bytes += store.tensors()[i].alloc_bytes;
  return bytes;
}

nlohmann::json gpu_memory_use(
    const std::vector<std::pair<std::string, const ExportableStore*>>& stores, double fraction,
    const std::function<uint64_t(int)>& memory_bytes) {
  struct Use {
    std::string uuid;
    uint64_t weights = 0;
    nlohmann::json ranks = nlohmann::json::array();
  };
  std::map<int, Use> by_device;
  for (const auto& [name, store] : stores) {
    const ShardedLayout* sharded = store->sharded();
    if (!sharded) continue;
    for (int r = 0; r < sharded->plan.ranks(); ++r) {
      const int device = sharded->devices[size_t(r)];
      if (device < 0) continue;  // host memory
      Use& use = by_device[device];
      use.uuid = sharded->gpu_uuids[size_t(r)];
      use.ranks.push_back({name, r});
    }
  }
  nlohmann::json out = nlohmann::json::array();
  for (auto& [device, use] : by_device) {
    for (const auto& [name, store] : stores) use.weights += sharded_bytes_on(*store, device);
    const uint64_t memory = memory_bytes(device);
    out.push_back({{"device", device},
                   {"gpu_uuid", use.uuid},
                   {"memory_bytes", memory},
                   {"limit_bytes", uint64_t(double(memory) * fraction)},
                   {"weights_bytes", use.weights},
                   {"ranks", std::move(use.ranks)}});
  }
  return out;
}

}  // namespace hearth
