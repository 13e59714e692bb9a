#include "worker/engine/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "kernels/philox.h"

namespace hearth {

namespace {

// Candidate order: larger logit first, lower id first among equals.
bool before(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first != b.first ? a.first > b.first : a.second < b.second;
}

[[noreturn]] void non_finite(uint64_t step, const std::string& which) {
  throw NonFiniteLogits("the logits at generation step " + std::to_string(step) +
                        " are not finite (" + which +
                        "): the model's weights or activations overflowed");
}

}  // namespace

float penalised_logit(float logit, float penalty) {
  return std::clamp(logit > 0 ? logit / penalty : logit * penalty, -FLT_MAX, FLT_MAX);
}

void check_device_sample(const SampledToken& sampled, int vocab, uint64_t step) {
  if (!std::isfinite(sampled.logprob) || sampled.token < 0 || sampled.token >= vocab)
    non_finite(step, "NaN or an infinity among them");
}

float token_logprob(std::span<const float> logits, int32_t token) {
  float max = -INFINITY;
  for (float v : logits) max = std::max(max, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(double(v) - max);
  return static_cast<float>(double(logits[token]) - max - std::log(sum));
}

SampledToken Sampler::sample(std::span<const float> logits, const SamplingParams& p,
                             std::span<const int32_t> seen, uint64_t step) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i]))
      non_finite(step, "logits[" + std::to_string(i) + "] is " + std::to_string(logits[i]));

  std::span<const float> l = logits;
  if (p.repetition_penalty != 1.0f && !seen.empty()) {
    adjusted_.assign(logits.begin(), logits.end());
    for (int32_t t : seen) {
      if (t < 0 || size_t(t) >= adjusted_.size()) continue;
      // Recomputed from the raw logit, so a token seen twice is penalised once.
      adjusted_[t] = penalised_logit(logits[t], p.repetition_penalty);
    }
    l = adjusted_;
  }

  SampledToken out;
  if (p.greedy()) {
    int32_t best = 0;
    for (size_t i = 1; i < l.size(); ++i)
      if (l[i] > l[best]) best = int32_t(i);
    out.token = best;
    out.logprob = token_logprob(logits, best);
    return out;
  }

  const double inv_t = 1.0 / p.temperature;
  float max = -INFINITY;
  for (float v : l) max = std::max(max, v);

  // Probabilities relative to the top token (its weight is 1). With no top-k, tokens below
  // (1 - top_p) / vocab of the top weight cannot reach the nucleus: even all of them together
  // hold less than 1 - top_p of the mass. Dropping them first keeps the sort short.
  candidates_.clear();
  if (p.top_k > 0) {
    candidates_.reserve(l.size());
    for (size_t i = 0; i < l.size(); ++i) candidates_.emplace_back(l[i], int32_t(i));
    const size_t k = std::min(size_t(p.top_k), candidates_.size());
    std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(), before);
    candidates_.resize(k);
  } else {
    double cutoff = 0.0;
    if (p.top_p < 1.0f) cutoff = (1.0 - p.top_p) / double(l.size());
    cutoff = std::max(cutoff, double(p.min_p));
    for (size_t i = 0; i < l.size(); ++i)
      if (std::exp((double(l[i]) - max) * inv_t) >= cutoff)
        candidates_.emplace_back(l[i], int32_t(i));
    std::sort(candidates_.begin(), candidates_.end(), before);
  }

  // Softmax over the candidates (top-k) or over the whole vocabulary (no top-k: the dropped
  // tokens still count towards the total, so top-p sees true probabilities).
  std::vector<double> weight(candidates_.size());
  double total = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i)
    weight[i] = std::exp((double(candidates_[i].first) - max) * inv_t);
  if (p.top_k > 0) {
    for (double w : weight) total += w;
  } else {
    for (float v : l) total += std::exp((double(v) - max) * inv_t);
  }

  size_t kept = candidates_.size();
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cum += weight[i];
      if (cum >= p.top_p * total) {
        kept = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * weight[0];
    size_t i = 1;
    while (i < kept && weight[i] >= floor) ++i;
    kept = i;
  }

  double kept_mass = 0.0;
  for (size_t i = 0; i < kept; ++i) kept_mass += weight[i];
  const double target = philox_uniform(p.seed, step, 0) * kept_mass;
  double cum = 0.0;
  size_t pick = kept - 1;
  for (size_t i = 0; i < kept; ++i) {
    cum += weight[i];
    if (cum > target) {
      pick = i;
      break;
    }
  }
  out.token = candidates_[pick].second;
  out.logprob = token_logprob(logits, out.token);
  return out;
}

}  // namespace hearth
