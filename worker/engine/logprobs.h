// Log-probabilities a request may ask for beside its sampled token: the N most likely tokens
// of a step, each with the same log-softmax value token_logprob (sampler.h) would give it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hearth {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

// The `n` tokens with the largest raw logits (larger first, lower id first among equals) and
// their log-softmax over all of `logits`, bit-identical to token_logprob(logits, token).
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n);

// Most top_logprobs a request may ask for (OpenAI's limit).
inline constexpr int kMaxTopLogprobs = 20;

}  // namespace hearth
