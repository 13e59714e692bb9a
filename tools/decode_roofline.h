// The bytes a decode step must stream, for the benchmarks' bandwidth rooflines.
#pragma once

#include <cstdint>

#include "weight-server/model/model_config.h"

namespace hearth::bench {

// Bytes of the matrices one forward pass streams (everything but the embedding table): the
// projections one byte a weight in an fp8 model (their scales are noise), the LM head 16-bit.
// Under tensor parallelism each of N GPUs streams 1/N of them.
inline uint64_t decode_weight_bytes(const ModelConfig& c) {
  const uint64_t h = uint64_t(c.hidden);
  const uint64_t per_layer = h * uint64_t(c.q_dim()) + 2 * h * uint64_t(c.kv_dim()) +
                             uint64_t(c.q_dim()) * h + 3 * h * uint64_t(c.intermediate);
  return per_layer * uint64_t(c.n_layers) * (c.quantization.fp8() ? 1 : 2) +
         h * uint64_t(c.vocab) * 2;
}

// KV bytes a run of `concurrency` requests of `prompt` tokens and `output` generated tokens
// moves, `per_token` bytes a position: the prompt's written and read once, then each generated
// token after the first reads its sequence's whole KV.
inline double run_kv_bytes(int concurrency, double per_token, double prompt, double output) {
  return concurrency * per_token * (prompt + (output - 1) * prompt + (output - 1) * output / 2);
}

// The ms one GPU of `tp` needs at `copy_gbps` for a decode step of `concurrency` sequences at
// context `mean_kv`: its 1/tp of the weights, and its `per_token` KV bytes of every position.
inline double decode_step_roofline_ms(const ModelConfig& c, int tp, int concurrency,
                                      double per_token, double mean_kv, double copy_gbps) {
  return (double(decode_weight_bytes(c)) / tp + concurrency * per_token * mean_kv) /
         (copy_gbps * 1e6);
}

}  // namespace hearth::bench
