// Turning logits into the next token: greedy, temperature, top-k, top-p, min-p and repetition
// penalty, with Philox supplying the one uniform number each step consumes. This host version
// is the reference; the CUDA backend implements the same rules on the GPU.
#pragma once

#include <cstdint>
#include <span>
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

// Picks the token for generation step `step` (0 for the first generated token). `seen` lists the
// tokens the repetition penalty applies to. Rules, in order:
//   1. repetition penalty: a seen token's logit is divided by the penalty if positive, else
//      multiplied by it;
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

}  // namespace hearth
