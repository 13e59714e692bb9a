// The shared sampling arithmetic (kernels/sampling_rules.h) and the request edits the host
// Sampler applies with it: logit_bias, frequency and presence penalties.
#include "kernels/sampling_rules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "worker/engine/request_settings.h"
#include "worker/engine/sampler.h"

namespace hearth {
namespace {

using sampling_rules::TokenEdit;

TEST(SamplingRules, DetLogIsCloseToTheTrueLogarithm) {
  for (float x : {1e-30f, 3e-8f, 0.1f, 0.5f, 0.70710677f, 0.7071068f, 1.0f, 1.4142135f, 1.4142137f,
                  2.0f, 10.0f, 16.6f, 1e10f, 3e38f}) {
    const double want = std::log(double(x));
    EXPECT_NEAR(sampling_rules::det_log(x), want, 4e-7 * std::max(1.0, std::fabs(want))) << x;
  }
  EXPECT_EQ(sampling_rules::det_log(1.0f), 0.0f);
}

TEST(SamplingRules, DetExpIsCloseToTheTrueExponential) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> x(-28.0f, 0.0f);
  for (int i = 0; i < 10000; ++i) {
    const float v = x(rng);
    const double want = std::exp(double(v));
    EXPECT_NEAR(sampling_rules::det_exp(v), want, 4e-7 * want) << v;
  }
  EXPECT_EQ(sampling_rules::det_exp(0.0f), 1.0f);
  EXPECT_EQ(sampling_rules::det_exp(-28.5f), 0.0f);
  EXPECT_EQ(sampling_rules::det_exp(-INFINITY), 0.0f);
  EXPECT_EQ(sampling_rules::det_exp(NAN), 0.0f);
}

TEST(SamplingRules, NucleusWeightsAreIntegersOfTheTopWeight) {
  EXPECT_EQ(sampling_rules::nucleus_weight(3.0f, 3.0f, 0.7f), uint64_t(1) << 39);
  EXPECT_EQ(sampling_rules::nucleus_weight(-INFINITY, 3.0f, 0.7f), 0u);
  EXPECT_NEAR(double(sampling_rules::nucleus_weight(2.0f, 3.0f, 1.0f)),
              std::exp(-1.0) * 549755813888.0, 1e-6 * 549755813888.0);
  EXPECT_EQ(sampling_rules::nucleus_need(1000, 0.9f), 900u);  // 899.99998: rounded up
  EXPECT_EQ(sampling_rules::nucleus_need(1000, 0.75f), 750u);
  EXPECT_EQ(sampling_rules::nucleus_need(1001, 0.5f), 501u);
  EXPECT_EQ(sampling_rules::nucleus_need(1000, 1.0f), 1000u);
  EXPECT_EQ(sampling_rules::nucleus_need(~uint64_t(0) >> 1, 1.0f), ~uint64_t(0) >> 1);
}

// The nucleus is the shortest prefix by (logit desc, id asc) whose integer mass reaches
// nucleus_need: a pick never falls outside it, and every token of it can be picked.
TEST(Sampler, TopPPicksOnlyFromTheIntegerNucleus) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 0.5f, -1.0f, 2.0f, 0.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.8f;
  // The nucleus by hand: order 1, 3, 2, 6, 0, 4, 7, 5.
  const int order[] = {1, 3, 2, 6, 0, 4, 7, 5};
  uint64_t total = 0;
  for (float v : logits) total += sampling_rules::nucleus_weight(v, 3.0f, 1.0f);
  const uint64_t need = sampling_rules::nucleus_need(total, p.top_p);
  std::vector<bool> in(logits.size(), false);
  uint64_t cum = 0;
  for (int id : order) {
    in[id] = true;
    cum += sampling_rules::nucleus_weight(logits[id], 3.0f, 1.0f);
    if (cum >= need) break;
  }
  std::vector<int> hits(logits.size(), 0);
  Sampler s;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    p.seed = seed;
    const int t = s.sample(logits, p, {}, 0).token;
    ASSERT_TRUE(in[t]) << t;
    ++hits[t];
  }
  for (size_t i = 0; i < logits.size(); ++i)
    if (in[i]) {
      EXPECT_GT(hits[i], 0) << i;
    }
}

// The Sampler's top-p (with top-k and min-p) against the rule written out plainly: every token
// ordered by (logit desc, id asc), the nucleus by integer weights, then the Gumbel-max pick. On
// coarse logits (ties everywhere), so the id order within equal values matters.
TEST(Sampler, TopPEqualsTheNucleusRuleWrittenOut) {
  std::mt19937 rng(7);
  Sampler s;
  for (int trial = 0; trial < 60; ++trial) {
    const int vocab = 50 + int(rng() % 500);
    std::vector<float> l(static_cast<size_t>(vocab));
    std::normal_distribution<float> d(0.0f, 2.0f);
    for (float& v : l) v = trial % 2 ? std::round(d(rng) * 2.0f) / 2.0f : d(rng);
    SamplingParams p;
    p.temperature = 0.3f + float(rng() % 20) / 10.0f;
    p.top_p = 0.05f + float(rng() % 95) / 100.0f;
    p.top_k = trial % 3 == 0 ? int(1 + rng() % 60) : 0;
    p.min_p = trial % 4 == 1 ? 0.02f : 0.0f;
    p.seed = rng();
    if (p.top_k == 1) p.top_k = 2;  // 1 is greedy
    std::vector<int> order(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) order[size_t(i)] = i;
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    if (p.top_k > 0 && p.top_k < vocab) order.resize(size_t(p.top_k));
    const float top = l[size_t(order[0])];
    uint64_t total = 0;
    for (int id : order) total += sampling_rules::nucleus_weight(l[id], top, p.temperature);
    const uint64_t need = sampling_rules::nucleus_need(total, p.top_p);
    uint64_t cum = 0;
    size_t kept = 0;
    while (kept < order.size() && cum < need)
      cum += sampling_rules::nucleus_weight(l[order[kept++]], top, p.temperature);
    for (uint64_t step = 0; step < 5; ++step) {
      float best_s = -INFINITY;
      int best = INT32_MAX;
      for (size_t j = 0; j < kept; ++j) {
        const int id = order[j];
        if (p.min_p > 0.0f && l[id] != top &&
            std::exp((double(l[id]) - top) / p.temperature) < double(p.min_p))
          continue;
        const float sc = sampling_rules::pick_score(l[id], top, p.temperature, p.seed, step, id);
        if (sampling_rules::beats(sc, id, best_s, best)) best_s = sc, best = id;
      }
      EXPECT_EQ(s.sample(l, p, {}, step).token, best)
          << "trial " << trial << " k " << p.top_k << " p " << p.top_p << " nucleus " << kept;
    }
  }
}

TEST(SamplingRules, GumbelNoiseIsFiniteAndVariesWithEveryCounter) {
  std::map<float, int> distinct;
  double sum = 0.0;
  const int n = 20000;
  for (int id = 0; id < n; ++id) {
    const float g = sampling_rules::gumbel(7, 3, id);
    ASSERT_TRUE(std::isfinite(g)) << id;
    distinct[g]++;
    sum += g;
  }
  EXPECT_GT(distinct.size(), size_t(n * 9 / 10));
  EXPECT_NEAR(sum / n, 0.5772, 0.03);  // the Gumbel mean: Euler's constant
  // The largest noise any u can give stays under the bound scans skip by.
  const float u_max = 16777215.0f / 16777216.0f;
  EXPECT_LT(-sampling_rules::det_log(-sampling_rules::det_log(u_max)),
            sampling_rules::kGumbelBound);
  EXPECT_NE(sampling_rules::gumbel(7, 3, 5), sampling_rules::gumbel(8, 3, 5));
  EXPECT_NE(sampling_rules::gumbel(7, 3, 5), sampling_rules::gumbel(7, 4, 5));
}

// Four tokens share a Philox draw (one word each): their noises are uncorrelated, with one
// another and with the next group's, and each is its word's.
TEST(SamplingRules, GumbelNoisesOfOneDrawAreUncorrelated) {
  const int groups = 20000;
  std::vector<std::array<double, 4>> g(groups);
  for (int k = 0; k < groups; ++k) {
    const Philox4x32 draw = sampling_rules::gumbel_draw(11, 2, k);
    for (int u = 0; u < 4; ++u) {
      g[k][u] = sampling_rules::gumbel(11, 2, 4 * k + u);
      ASSERT_EQ(float(g[k][u]), sampling_rules::gumbel_of_word(draw.v[u])) << k << " " << u;
    }
  }
  auto correlation = [&](auto x, auto y) {
    double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
    for (int k = 0; k + 1 < groups; ++k) {
      const double a = x(k), b = y(k);
      sx += a, sy += b, sxx += a * a, syy += b * b, sxy += a * b;
    }
    const double n = groups - 1;
    return (sxy / n - sx / n * sy / n) /
           std::sqrt((sxx / n - sx / n * sx / n) * (syy / n - sy / n * sy / n));
  };
  for (int u = 0; u < 4; ++u)
    for (int v = u + 1; v < 4; ++v)
      EXPECT_LT(
          std::abs(correlation([&](int k) { return g[k][u]; }, [&](int k) { return g[k][v]; })),
          0.03)
          << "words " << u << " and " << v;
  EXPECT_LT(
      std::abs(correlation([&](int k) { return g[k][3]; }, [&](int k) { return g[k + 1][0]; })),
      0.03);
}

TEST(SamplingRules, EditedLogitAppliesBiasThenRepetitionThenFrequencyAndPresence) {
  TokenEdit e{0, 1.0f, 0, 1};
  EXPECT_EQ(sampling_rules::edited_logit(3.0f, e, 2.0f, 0.0f, 0.0f), 2.0f);  // (3 + 1) / 2
  e = {0, -2.0f, 0, 1};
  EXPECT_EQ(sampling_rules::edited_logit(1.0f, e, 2.0f, 0.0f, 0.0f), -2.0f);  // (1 - 2) x 2
  e = {0, 0.0f, 3, 0};
  EXPECT_EQ(sampling_rules::edited_logit(1.0f, e, 2.0f, 0.5f, 0.25f), -0.75f);  // 1 - 1.5 - .25
  e = {0, 0.0f, 0, 0};
  EXPECT_EQ(sampling_rules::edited_logit(1.0f, e, 2.0f, 0.5f, 0.25f), 1.0f);  // never generated
  e = {0, 100.0f, 0, 0};
  EXPECT_EQ(sampling_rules::edited_logit(3.4e38f, e, 1.0f, 0.0f, 0.0f), 3.4e38f + 100.0f);
  e = {0, 0.0f, 1, 0};
  EXPECT_TRUE(std::isfinite(sampling_rules::edited_logit(-3.4e38f, e, 1.0f, 2.0f, 2.0f) * 1.0f));
}

TEST(TokenEdits, MergeBiasSeenAndGeneratedCountsPerToken) {
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 1.0f;
  p.logit_bias = {{2, 5.0f}, {9, -1.0f}, {50, 3.0f}};  // 50: outside a vocabulary of 10
  // Prompt 1 2 3, then 3 generated tokens: 4 1 4.
  const std::vector<int32_t> seen = {1, 2, 3, 4, 1, 4};
  const auto edits = token_edits(p, seen, 3, 10);
  ASSERT_EQ(edits.size(), 5u);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 9};
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(edits[i].token, ids[i]);
  EXPECT_EQ(edits[0].generated, 1);  // token 1: once in the prompt, once generated
  EXPECT_EQ(edits[0].seen, 1);
  EXPECT_EQ(edits[1].bias, 5.0f);
  EXPECT_EQ(edits[1].generated, 0);  // in the prompt only
  EXPECT_EQ(edits[3].generated, 2);
  EXPECT_EQ(edits[4].seen, 0);
  EXPECT_EQ(edits[4].bias, -1.0f);
  EXPECT_TRUE(token_edits(SamplingParams{}, seen, 3, 10).empty());
}

TEST(Sampler, LogitBiasSteersGreedyAndSampling) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  const std::vector<float> l = {3.0f, 2.0f, 1.0f};
  p.logit_bias = {{2, 2.5f}};
  EXPECT_EQ(s.sample(l, p, {}, 0).token, 2);
  // The logprob stays the raw model's.
  EXPECT_EQ(s.sample(l, p, {}, 0).logprob, token_logprob(l, 2));
  p.temperature = 1.0f;
  p.logit_bias = {{0, -100.0f}, {1, -100.0f}};
  for (uint64_t step = 0; step < 200; ++step) EXPECT_EQ(s.sample(l, p, {}, step).token, 2);
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOnlyGeneratedTokens) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 0.6f;
  const std::vector<float> l = {3.0f, 2.0f, 1.0f};
  // Token 0 fills the prompt: no penalty yet.
  const std::vector<int32_t> prompt_only = {0, 0, 0};
  EXPECT_EQ(s.sample(l, p, prompt_only, 0).token, 0);
  // Generated once: 3 - 0.6 = 2.4 > 2; twice: 1.8 < 2.
  const std::vector<int32_t> once = {0, 0, 0, 0};
  EXPECT_EQ(s.sample(l, p, once, 1).token, 0);
  const std::vector<int32_t> twice = {0, 0, 0, 0, 0};
  EXPECT_EQ(s.sample(l, p, twice, 2).token, 1);
  // Presence: once is enough.
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 1.5f;
  EXPECT_EQ(s.sample(l, p, once, 1).token, 1);
  // Negative penalties encourage repeats.
  p.presence_penalty = -2.0f;
  const std::vector<int32_t> gen2 = {0, 2};
  EXPECT_EQ(s.sample(l, p, gen2, 1).token, 0);  // 1 + 2 = 3 ties 3: lowest id wins
  const std::vector<int32_t> gen1 = {0, 1};
  EXPECT_EQ(s.sample(l, p, gen1, 1).token, 1);  // 2 + 2 = 4
}

TEST(Sampler, GumbelPickFollowsTheSoftmaxOfTheSurvivors) {
  // Empirical frequencies over many seeds against softmax(logit / T) over the survivors of
  // top-k; a loose bound, fixed seeds, so nothing is left to chance.
  Sampler s;
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 1.0f, 1.5f};
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 3;
  const int n = 30000;
  std::map<int, int> counts;
  for (int i = 0; i < n; ++i) {
    p.seed = uint64_t(i) * 7919;
    counts[s.sample(l, p, {}, uint64_t(i % 13)).token]++;
  }
  double z = 0.0;
  for (int t : {1, 3, 4}) z += std::exp(l[t] / 0.7);
  for (int t : {1, 3, 4}) EXPECT_NEAR(counts[t] / double(n), std::exp(l[t] / 0.7) / z, 0.012) << t;
  EXPECT_EQ(counts[0] + counts[2], 0);
}

TEST(RequestSettings, LogitBiasAndPenaltyRanges) {
  EXPECT_EQ(checked_logit_bias({{7, 1.5}, {2, -100.0}}),
            (std::vector<std::pair<int32_t, float>>{{2, -100.0f}, {7, 1.5f}}));
  EXPECT_THROW(checked_logit_bias({{7, 100.5}}), SettingError);
  EXPECT_THROW(checked_logit_bias({{-1, 1.0}}), SettingError);
  EXPECT_THROW(checked_logit_bias({{3, 1.0}, {3, 2.0}}), SettingError);
  std::vector<std::pair<int64_t, double>> many;
  for (int i = 0; i < 301; ++i) many.emplace_back(i, 1.0);
  EXPECT_THROW(checked_logit_bias(many), SettingError);
  many.pop_back();
  EXPECT_EQ(checked_logit_bias(many).size(), 300u);
  EXPECT_THROW(check_logit_bias_ids({{10, 1.0f}}, 10), SettingError);
  EXPECT_NO_THROW(check_logit_bias_ids({{9, 1.0f}}, 10));
  EXPECT_THROW(checked_frequency_penalty(2.5), SettingError);
  EXPECT_THROW(checked_presence_penalty(-2.5), SettingError);
  EXPECT_EQ(checked_presence_penalty(-2.0), -2.0f);
}

}  // namespace
}  // namespace hearth
