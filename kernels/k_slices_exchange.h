// Where the two K halves of a wgmma matmul tile meet (kernels/k_slices.cuh): host arithmetic
// on the caller's workspace, apart from the device code so that it is checked without a GPU.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace hearth::kernels::k_slices {

// Where a launch's slices meet, carved from the caller's workspace: a counter per output tile
// at a fixed place (so a launch with other tiles never finds a partial where its counters are),
// then the partial sums, per (tile, slice).
struct Exchange {
  unsigned* counters = nullptr;
  float* partial = nullptr;
};
constexpr size_t kMaxCounters = size_t(1) << 18;
constexpr size_t kCounterBytes = kMaxCounters * sizeof(unsigned);

// The exchange for a launch of `tiles` output tiles and `partial_floats` partial sums in a
// workspace of `bytes` (zeroed once when allocated); std::invalid_argument naming `kernel` when
// it does not fit.
inline Exchange exchange_in(void* workspace, size_t bytes, size_t tiles, size_t partial_floats,
                            const char* kernel) {
  const size_t need = kCounterBytes + partial_floats * sizeof(float);
  if (tiles > kMaxCounters)
    throw std::invalid_argument(std::string(kernel) + ": " + std::to_string(tiles) +
                                " output tiles summed from K slices, at most " +
                                std::to_string(kMaxCounters));
  if (!workspace || bytes < need)
    throw std::invalid_argument(std::string(kernel) + ": K is summed in slices here and needs a " +
                                std::to_string(need) + "-byte workspace, " +
                                std::to_string(workspace ? bytes : 0) +
                                " given (batch_matmul_workspace_bytes)");
  Exchange e;
  e.counters = static_cast<unsigned*>(workspace);
  e.partial = reinterpret_cast<float*>(static_cast<char*>(workspace) + kCounterBytes);
  return e;
}

}  // namespace hearth::kernels::k_slices
