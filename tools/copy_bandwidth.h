// The decode rooflines' ceiling, measured: this GPU's device-to-device copy bandwidth (bytes
// read plus bytes written a second), so that "of roofline" means the same on any card.
#pragma once

#include <cstddef>

namespace hearth::bench {

// GB/s of cudaMemcpy between two `bytes` buffers on the current device, the best of `copies`
// timed copies after one untimed. Throws std::runtime_error (from the CUDA checks) without a GPU
// or the memory.
double measure_copy_gbps(size_t bytes = size_t(1) << 30, int copies = 10);

// The benches' ceiling: `given` when positive (--copy-gbps), else measured here and said so on
// stderr.
double copy_ceiling_gbps(double given);

}  // namespace hearth::bench
