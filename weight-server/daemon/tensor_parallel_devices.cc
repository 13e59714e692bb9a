#include "weight-server/daemon/tensor_parallel_devices.h"

#include <set>
#include <stdexcept>
#include <string>

namespace hearth {

std::vector<int> resolve_tensor_parallel_devices(const std::vector<int>& requested, int ranks,
                                                 int present) {
  const std::string tp = "--tensor-parallel " + std::to_string(ranks);
  if (ranks > present)
    throw std::runtime_error(tp + " needs " + std::to_string(ranks) +
                             " GPUs (one per rank), but this machine has " +
                             std::to_string(present));
  if (requested.empty()) {
    std::vector<int> devices(static_cast<size_t>(ranks), 0);
    for (int r = 0; r < ranks; ++r) devices[size_t(r)] = r;
    return devices;
  }
  if (requested.size() != size_t(ranks))
    throw std::runtime_error("--devices names " + std::to_string(requested.size()) + " GPUs for " +
                             tp + ": name one per rank");
  std::set<int> seen;
  for (const int d : requested) {
    if (d < 0 || d >= present)
      throw std::runtime_error("--devices: device " + std::to_string(d) +
                               " is not present (this machine has devices 0.." +
                               std::to_string(present - 1) + ")");
    if (!seen.insert(d).second)
      throw std::runtime_error("--devices: device " + std::to_string(d) +
                               " is named twice (one GPU per rank)");
  }
  return requested;
}

}  // namespace hearth
