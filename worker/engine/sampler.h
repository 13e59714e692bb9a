// Turning logits into the next token: logit_bias, repetition / frequency / presence penalties,
// greedy, temperature, top-k, top-p, min-p, and the Gumbel-max pick with Philox noise per token
// (kernels/sampling_rules.h). This host version is the reference; the CUDA backend implements
// the same rules on the GPU with the same arithmetic.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/sampling_rules.h"

namespace hearth {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;  // 1: off; applied to every token seen so far (HF rule)
  // OpenAI's penalties over the tokens generated so far: frequency x count + presence (count >
  // 0) subtracted from the logit. 0: off.
  float frequency_penalty = 0.0f, presence_penalty = 0.0f;
  // Added to the raw logit of each listed token (OpenAI's logit_bias), ids ascending and unique.
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;  // log-softmax of the raw logits (before penalty and temperature)
};

// Logits that hold NaN or an infinity: the model's weights or activations overflowed, and no
// token can be chosen from them.
class NonFiniteLogits : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The per-token edits of a request at generation step `step` (sampling_rules.h), ids ascending:
// every logit_bias entry, every token of `seen` when the repetition penalty is on, and the
// generated tokens (the last `step` of `seen`) with their counts when a frequency or presence
// penalty is on. Empty when the request edits no logit.
std::vector<sampling_rules::TokenEdit> token_edits(const SamplingParams& params,
                                                   std::span<const int32_t> seen, uint64_t step,
                                                   int vocab);

// Picks the token for generation step `step` (0 for the first generated token). `seen` is the
// sequence so far (prompt, then the `step` generated tokens). Logits that are not all finite
// throw NonFiniteLogits naming the step. Rules, in order:
//   1. adjusted logits (sampling_rules::edited_logit): logit_bias, then the repetition penalty
//      on seen tokens, then frequency and presence penalties on generated ones;
//   2. greedy: the highest logit, lowest id among equals;
//   3. otherwise candidates are ordered by (logit desc, id asc); top-k keeps the first k; the
//      probabilities softmax(logit / temperature) over them; top-p keeps the shortest prefix
//      whose probability reaches top_p (integer weights: sampling_rules::nucleus_weight); min-p
//      drops tokens below min_p x the top probability; the pick is the survivor with the highest
//      sampling_rules::pick_score (Gumbel-max: distributed as softmax(logit / T) over the
//      survivors), lowest id among equals.
class Sampler {
 public:
  SampledToken sample(std::span<const float> logits, const SamplingParams& params,
                      std::span<const int32_t> seen, uint64_t step);

 private:
  std::vector<float> adjusted_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

// log-softmax of logits[token], computed in double for a stable, order-fixed sum.
float token_logprob(std::span<const float> logits, int32_t token);

// The repetition penalty's rule for one seen token (the CUDA kernels apply the same). It never
// turns a finite logit into an infinite one, which would leave nothing to sample.
float penalised_logit(float logit, float penalty);

// For a sampler on the device, whose kernels make the logprob NaN when any logit is not
// finite: throws NonFiniteLogits naming `step` when `sampled` shows that, or holds a token
// outside [0, vocab).
void check_device_sample(const SampledToken& sampled, int vocab, uint64_t step);

}  // namespace hearth
