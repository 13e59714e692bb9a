// The GPUs a tensor-parallel vmm server puts its ranks on (issue 26): rank r on devices[r], one
// GPU per rank. Checked before anything is uploaded, so a bad list fails in milliseconds naming
// the device at fault rather than after half a model is on the GPUs.
#pragma once

#include <vector>

namespace hearth {

// `requested` (empty: 0..ranks-1) for `ranks` ranks on a machine with `present` GPUs. Throws
// std::runtime_error when there are more ranks than GPUs, the list is not one device per rank,
// a device is named twice or is not present.
std::vector<int> resolve_tensor_parallel_devices(const std::vector<int>& requested, int ranks,
                                                 int present);

}  // namespace hearth
