// The request mix of the GPU engines' batch-invariance tests: prompts of 1 .. 700 tokens (some
// cross an attention split), short outputs without EOS, a sampling seed each.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "worker/engine/request.h"

namespace hearth::test {

// `n` requests over token ids below `vocab`; request i samples as kinds[i % kinds.size()], with
// its own seed. `seed` picks the prompts, lengths and sampling seeds.
inline std::vector<Request> mixed_requests(int n, int vocab, uint32_t seed,
                                           std::span<const SamplingParams> kinds) {
  std::mt19937 rng(seed);
  const int lengths[] = {1, 3, 17, 64, 100, 129, 250, 513, 700};
  std::vector<Request> requests;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    const int len = lengths[(i * 5 + 2) % 9];
    for (int t = 0; t < len; ++t) r.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    RequestSettings& s = r.settings;
    s.max_tokens = 4 + int(rng() % 28);
    s.ignore_eos = true;
    s.sampling = kinds[size_t(i) % kinds.size()];
    s.sampling.seed = rng();
    requests.push_back(std::move(r));
  }
  return requests;
}

}  // namespace hearth::test
