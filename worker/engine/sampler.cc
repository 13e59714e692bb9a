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

std::vector<sampling_rules::TokenEdit> token_edits(const SamplingParams& p,
                                                   std::span<const int32_t> seen, uint64_t step,
                                                   int vocab) {
  std::vector<sampling_rules::TokenEdit> edits;
  auto add = [&](int32_t t) -> sampling_rules::TokenEdit* {
    if (t < 0 || t >= vocab) return nullptr;
    return &edits.emplace_back(sampling_rules::TokenEdit{t, 0.0f, 0, 0});
  };
  for (const auto& [t, bias] : p.logit_bias)
    if (auto* e = add(t)) e->bias = bias;
  if (p.repetition_penalty != 1.0f)
    for (int32_t t : seen)
      if (auto* e = add(t)) e->seen = 1;
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    const size_t generated = size_t(std::min<uint64_t>(step, seen.size()));
    for (int32_t t : seen.last(generated))
      if (auto* e = add(t)) e->generated = 1;
  }
  // Merge the entries of each token: one edit per id.
  std::sort(edits.begin(), edits.end(),
            [](const auto& a, const auto& b) { return a.token < b.token; });
  size_t out = 0;
  for (size_t i = 0; i < edits.size(); ++i) {
    if (out > 0 && edits[out - 1].token == edits[i].token) {
      sampling_rules::TokenEdit& m = edits[out - 1];
      m.bias += edits[i].bias;  // at most one entry carries a bias: ids are unique there
      m.generated += edits[i].generated;
      m.seen |= edits[i].seen;
    } else {
      edits[out++] = edits[i];
    }
  }
  edits.resize(out);
  return edits;
}

SampledToken Sampler::sample(std::span<const float> logits, const SamplingParams& p,
                             std::span<const int32_t> seen, uint64_t step) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i]))
      non_finite(step, "logits[" + std::to_string(i) + "] is " + std::to_string(logits[i]));

  std::span<const float> l = logits;
  const std::vector<sampling_rules::TokenEdit> edits =
      token_edits(p, seen, step, int(logits.size()));
  if (!edits.empty()) {
    adjusted_.assign(logits.begin(), logits.end());
    // From the raw logit, so a token seen twice is penalised once.
    for (const sampling_rules::TokenEdit& e : edits)
      adjusted_[e.token] = sampling_rules::edited_logit(logits[e.token], e, p.repetition_penalty,
                                                        p.frequency_penalty, p.presence_penalty);
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
  auto weight = [&](float v) { return std::exp((double(v) - max) * inv_t); };

  // The survivors of top-k, top-p and min-p. Only top-p needs an order (its prefix mass); the
  // Gumbel-max pick needs none.
  candidates_.clear();
  if (p.top_p < 1.0f) {
    // The nucleus by integer weights (sampling_rules::nucleus_weight), so its mass is exact in
    // any order: the tokens by (logit desc, id asc) through the first whose running mass
    // reaches nucleus_need of the total (the top-k candidates', or the whole vocabulary's).
    auto nw = [&](float v) { return sampling_rules::nucleus_weight(v, max, p.temperature); };
    uint64_t total = 0;
    if (p.top_k > 0) {
      candidates_.reserve(l.size());
      for (size_t i = 0; i < l.size(); ++i) candidates_.emplace_back(l[i], int32_t(i));
      const size_t k = std::min(size_t(p.top_k), candidates_.size());
      std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(), before);
      candidates_.resize(k);
      for (const auto& c : candidates_) total += nw(c.first);
    } else {
      for (float v : l) total += nw(v);
      // A token is kept only if the tokens from it down hold more than total - need, and they
      // hold at most vocab x its weight (weights follow the logits, to an ulp: hence the 2).
      // The others all come after the nucleus: only the rest need the sort.
      const double spare = double(total - sampling_rules::nucleus_need(total, p.top_p));
      const double reach = 2.0 * double(l.size());
      for (size_t i = 0; i < l.size(); ++i)
        if (reach * double(nw(l[i])) > spare) candidates_.emplace_back(l[i], int32_t(i));
      std::sort(candidates_.begin(), candidates_.end(), before);
    }
    const uint64_t need = sampling_rules::nucleus_need(total, p.top_p);
    size_t kept = candidates_.size();
    uint64_t cum = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cum += nw(candidates_[i].first);
      if (cum >= need) {
        kept = i + 1;
        break;
      }
    }
    candidates_.resize(kept);
  } else if (p.top_k > 0 && size_t(p.top_k) < l.size()) {
    candidates_.reserve(l.size());
    for (size_t i = 0; i < l.size(); ++i) candidates_.emplace_back(l[i], int32_t(i));
    const size_t k = size_t(p.top_k);
    std::nth_element(candidates_.begin(), candidates_.begin() + (k - 1), candidates_.end(), before);
    candidates_.resize(k);
  } else {
    candidates_.reserve(l.size());
    for (size_t i = 0; i < l.size(); ++i) candidates_.emplace_back(l[i], int32_t(i));
  }

  // min-p: the top weight is 1, so the floor is min_p itself. The top token always survives.
  // Start as the device's reduction does: every survivor beats this.
  float best_score = -INFINITY;
  int32_t best = INT32_MAX;
  for (const auto& [v, id] : candidates_) {
    if (p.min_p > 0.0f && v != max && weight(v) < double(p.min_p)) continue;
    const float scaled = sampling_rules::scaled_logit(v, max, p.temperature);
    // Cannot reach the best so far even with the largest noise: its noise is not needed.
    if (scaled + sampling_rules::kGumbelBound < best_score) continue;
    const float score = HEARTH_SR_ADD(scaled, sampling_rules::gumbel(p.seed, step, id));
    if (sampling_rules::beats(score, id, best_score, best)) best_score = score, best = id;
  }
  out.token = best;
  out.logprob = token_logprob(logits, out.token);
  return out;
}

}  // namespace hearth
