// The fuzz tests' random numbers: splitmix64 from a case number, so the same case always makes
// the same input and a failure in CI reproduces from the number it prints.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hearth::fuzz {

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? next() % n : 0; }
};

}  // namespace hearth::fuzz
