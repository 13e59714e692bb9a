// The mixed-length workload of issue 23, drawn once for both benchmarks that run it
// (`hearth-bench --serve-bench --mixed` in one engine, `hearth-gateway-bench --mixed` through
// HTTP): per request a prompt length, the prompt's token ids and an output length, uniform in
// their ranges, from splitmix64 at a seed, so the workload is the same on every run and machine.
#pragma once

#include <cstdint>
#include <vector>

namespace hearth::bench {

struct MixedLengths {
  int min_prompt = 16, max_prompt = 1024, min_output = 16, max_output = 512;
};

struct MixedDraw {
  std::vector<int32_t> prompt;  // ids in [0, vocab)
  int max_tokens = 0;
};

// splitmix64's next value.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline int uniform_int(uint64_t& state, int lo, int hi) {
  return lo + int(splitmix64(state) % uint64_t(hi - lo + 1));
}

// `requests` draws in order: the lengths do not depend on `vocab` (one draw per token id
// whatever its range), so two vocabularies give the same lengths.
inline std::vector<MixedDraw> mixed_draws(uint64_t seed, int requests, const MixedLengths& l,
                                          int vocab) {
  uint64_t rng = seed;
  std::vector<MixedDraw> out(requests > 0 ? size_t(requests) : 0);
  for (MixedDraw& d : out) {
    d.prompt.resize(size_t(uniform_int(rng, l.min_prompt, l.max_prompt)));
    for (int32_t& t : d.prompt) t = int32_t(splitmix64(rng) % uint64_t(vocab));
    d.max_tokens = uniform_int(rng, l.min_output, l.max_output);
  }
  return out;
}

}  // namespace hearth::bench
