// What the generation loop needs from an engine: run tokens through the model, appending to
// its KV cache, and pick the next token. The CPU backend is the numerical reference; the CUDA
// backend runs the same graph on the GPU.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "worker/engine/sampler.h"

namespace hearth {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int context_length() const = 0;

  // Runs `tokens` at positions [start_pos, start_pos + tokens.size()), storing their keys and
  // values in the cache, and computes the logits of the last one. Positions past start_pos are
  // forgotten, so a caller may rewind. Throws when the context would overflow.
  virtual void forward(std::span<const int32_t> tokens, int start_pos) = 0;

  // The last forward's logits, copied to the host if needed; valid until the next forward.
  virtual std::span<const float> logits() = 0;

  // Picks the next token from the last forward's logits. The default samples on the host.
  virtual SampledToken sample(const SamplingParams& params, std::span<const int32_t> seen,
                              uint64_t step) {
    return host_sampler_.sample(logits(), params, seen, step);
  }

 private:
  Sampler host_sampler_;
};

}  // namespace hearth
