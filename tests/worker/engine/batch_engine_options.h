// The batched engines' options in their tests: the step's token budget, the running requests
// and the KV pool in tokens, everything else at its default.
#pragma once

#include <cstdint>

#include "worker/engine/engine_options.h"

namespace hearth::test {

inline EngineOptions batch_engine_options(int max_batch_tokens = 2048, int max_running = 128,
                                          int64_t pool_tokens = 1 << 17) {
  EngineOptions o;
  o.max_batch_tokens = max_batch_tokens;
  o.max_running = max_running;
  o.kv_pool_tokens = pool_tokens;
  return o;
}

}  // namespace hearth::test
