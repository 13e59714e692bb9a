// Turning logits into the next token: greedy, temperature, top-k, top-p, min-p and repetition
// penalty, with Philox supplying the one uniform number each step consumes. This host version
// is the reference; the CUDA backend implements the same rules on the GPU.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace hearth {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;  // 1: off; applied to every token seen so far (HF rule)
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

// Picks the token for generation step `step` (0 for the first generated token). `seen` lists the
// tokens the repetition penalty applies to. Logits that are not all finite throw
// NonFiniteLogits naming the step. Rules, in order:
//   1. repetition penalty: a seen token's logit is divided by the penalty if positive, else
//      multiplied by it, saturating at the largest float (penalised_logit);
//   2. greedy: the highest logit, lowest id among equals;
//   3. otherwise candidates are ordered by (logit desc, id asc); top-k keeps the first k; the
//      probabilities softmax(logit / temperature) over them; top-p keeps the shortest prefix
//      whose probability reaches top_p; min-p drops tokens below min_p x the top probability;
//      u = philox_uniform(seed, step) picks the first candidate whose cumulative probability
//      exceeds u x (kept mass).
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
