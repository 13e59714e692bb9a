// The request mixes of the GPU engines' batch-invariance tests: prompts of 1 .. 700 tokens (some
// cross an attention split), short outputs without EOS, a sampling seed each.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "worker/engine/engine_options.h"
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

// The tensor-parallel tests' mix: prompts of 1 .. 513 tokens (some longer than a 256-token step:
// chunked), 4 .. 23 tokens out without EOS; every third request greedy, the rest at temperature
// 0.9, every third of those with top_k 40; `seed` picks the prompts, lengths and seeds.
inline std::vector<Request> tp_mixed_requests(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  const int lengths[] = {1, 5, 33, 100, 300, 513};
  std::vector<Request> requests;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    for (int t = 0, len = lengths[(i * 5 + 1) % 6]; t < len; ++t)
      r.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    r.settings.max_tokens = 4 + int(rng() % 20);
    r.settings.ignore_eos = true;
    r.settings.sampling.seed = rng();
    r.settings.sampling.temperature = i % 3 == 0 ? 0.0f : 0.9f;
    if (i % 3 == 2) r.settings.sampling.top_k = 40;
    requests.push_back(std::move(r));
  }
  return requests;
}

// The tensor-parallel tests' engine options: `tp` ranks, 64 running, a 64k-token pool.
inline EngineOptions tp_engine_options(int tp, int max_batch_tokens = 256) {
  EngineOptions o;
  o.max_batch_tokens = max_batch_tokens;
  o.max_running = 64;
  o.kv_pool_tokens = 1 << 16;
  o.tensor_parallel = tp;
  return o;
}

}  // namespace hearth::test
