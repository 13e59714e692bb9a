// Philox4x32-10, the counter-based generator hearth samples with. A (seed, counter) pair always
// yields the same numbers, on the CPU and on the GPU, whatever the machine or library: unlike
// std::*_distribution, nothing here is implementation-defined.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HEARTH_HOST_DEVICE __host__ __device__
#else
#define HEARTH_HOST_DEVICE
#endif

namespace hearth {

struct Philox4x32 {
  uint32_t v[4];
};

HEARTH_HOST_DEVICE inline Philox4x32 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2,
                                                   uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c0;
    const uint64_t p1 = uint64_t(kMul1) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// The uniform number in [0, 1) that decides sampling step `step` of stream `stream` under
// `seed`: 53 random bits, so every double in the grid is equally likely.
HEARTH_HOST_DEVICE inline double philox_uniform(uint64_t seed, uint64_t step, uint32_t stream) {
  const Philox4x32 r = philox4x32_10(uint32_t(step), uint32_t(step >> 32), stream, 0,
                                     uint32_t(seed), uint32_t(seed >> 32));
  const uint64_t bits = (uint64_t(r.v[0] >> 5) << 26) | (r.v[1] >> 6);
  return double(bits) * (1.0 / 9007199254740992.0);  // 2^-53
}

}  // namespace hearth
