#include "worker/engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "kernels/philox.h"

namespace hearth {
namespace {

TEST(Philox, MatchesPublishedKnownAnswers) {
  // Known-answer vectors of Philox4x32-10 from the Random123 distribution.
  Philox4x32 zero = philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  Philox4x32 ones = philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
}

TEST(Philox, UniformsAreInRangeAndLookUniform) {
  double sum = 0;
  int below_quarter = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = philox_uniform(42, uint64_t(i), 0);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    below_quarter += u < 0.25;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  EXPECT_NEAR(below_quarter / double(n), 0.25, 0.01);
  EXPECT_NE(philox_uniform(1, 0, 0), philox_uniform(2, 0, 0));
  EXPECT_NE(philox_uniform(1, 0, 0), philox_uniform(1, 1, 0));
  EXPECT_NE(philox_uniform(1, 0, 0), philox_uniform(1, 0, 1));
}

SamplingParams warm(float t = 1.0f) {
  SamplingParams p;
  p.temperature = t;
  return p;
}

TEST(Sampler, GreedyPicksTheLargestLogitAndTheLowestIdOnTies) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
  SampledToken t = s.sample(l, p, {}, 0);
  EXPECT_EQ(t.token, 1);
  EXPECT_NEAR(t.logprob, token_logprob(l, 1), 1e-6);
  p.temperature = 0.7f;
  p.top_k = 1;
  EXPECT_EQ(s.sample(l, p, {}, 5).token, 1);
}

TEST(Sampler, LogprobIsLogSoftmaxOfRawLogits) {
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(token_logprob(l, 2), 3.0 - std::log(z), 1e-6);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  Sampler s;
  std::vector<float> l = {0.0f, 1.0f, 2.0f, -10.0f};
  std::map<int, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) counts[s.sample(l, warm(), {}, uint64_t(i)).token]++;
  const double z = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(-10.0);
  EXPECT_NEAR(counts[0] / double(n), 1 / z, 0.01);
  EXPECT_NEAR(counts[1] / double(n), std::exp(1.0) / z, 0.01);
  EXPECT_NEAR(counts[2] / double(n), std::exp(2.0) / z, 0.01);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  Sampler s;
  std::vector<float> l = {0.0f, 1.0f};
  int cold = 0, hot = 0;
  for (int i = 0; i < 4000; ++i) {
    cold += s.sample(l, warm(0.25f), {}, uint64_t(i)).token == 1;
    hot += s.sample(l, warm(4.0f), {}, uint64_t(i)).token == 1;
  }
  EXPECT_GT(cold, 3800);  // e^4 : 1
  EXPECT_LT(hot, 2600);   // e^0.25 : 1, about 56%
  EXPECT_GT(hot, 1900);
}

TEST(Sampler, TopKTopPAndMinPRestrictTheCandidates) {
  Sampler s;
  // Probabilities about 0.64, 0.24, 0.09, 0.03.
  std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  auto seen_tokens = [&](SamplingParams p) {
    std::set<int> seen;
    for (int i = 0; i < 3000; ++i) seen.insert(s.sample(l, p, {}, uint64_t(i)).token);
    return seen;
  };
  SamplingParams p = warm();
  EXPECT_EQ(seen_tokens(p), (std::set<int>{0, 1, 2, 3}));
  p.top_k = 2;
  EXPECT_EQ(seen_tokens(p), (std::set<int>{0, 1}));
  p = warm();
  p.top_p = 0.8f;  // 0.64 < 0.8 <= 0.88
  EXPECT_EQ(seen_tokens(p), (std::set<int>{0, 1}));
  p.top_p = 0.5f;
  EXPECT_EQ(seen_tokens(p), (std::set<int>{0}));
  p = warm();
  p.min_p = 0.1f;  // keeps p >= 0.064
  EXPECT_EQ(seen_tokens(p), (std::set<int>{0, 1, 2}));
}

TEST(Sampler, RepetitionPenaltyFollowsTheHfRule) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  std::vector<float> l = {3.0f, 2.0f, -1.0f};
  std::vector<int32_t> seen = {0, 0};
  EXPECT_EQ(s.sample(l, p, seen, 0).token, 1);  // 3 / 2 = 1.5 < 2
  std::vector<float> neg = {-1.0f, -1.5f};
  std::vector<int32_t> seen1 = {0};
  EXPECT_EQ(s.sample(neg, p, seen1, 0).token, 1);  // -1 * 2 = -2 < -1.5
}

TEST(Sampler, SameSeedAndStepGiveTheSameToken) {
  Sampler a, b;
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(std::sin(double(i)) * 3);
  SamplingParams p = warm(0.9f);
  p.top_p = 0.95f;
  p.seed = 7;
  std::set<int> distinct;
  for (uint64_t step = 0; step < 50; ++step) {
    const int32_t t = a.sample(l, p, {}, step).token;
    EXPECT_EQ(t, b.sample(l, p, {}, step).token);
    distinct.insert(t);
  }
  EXPECT_GT(distinct.size(), 5u);  // and the steps differ
}

// Issue 12: NaN or infinite logits (a model whose weights overflowed) crashed sampling with
// temperature or min-p, and greedy and top-k silently gave token 0. Every mode refuses them.
TEST(Sampler, NonFiniteLogitsAreAnErrorNamingTheStep) {
  std::vector<SamplingParams> modes(5, warm(0.8f));
  modes[0].temperature = 0;  // greedy
  modes[1].top_k = 2;
  modes[3].min_p = 0.1f;
  modes[4].top_p = 0.9f;
  for (const float bad : {NAN, INFINITY, -INFINITY}) {
    for (const bool all_bad : {false, true}) {
      std::vector<float> l = {0.5f, 1.0f, bad, 2.0f};
      if (all_bad) l.assign(4, bad);
      for (size_t m = 0; m < modes.size(); ++m) {
        Sampler s;
        try {
          const SampledToken t = s.sample(l, modes[m], {}, 7);
          ADD_FAILURE() << "mode " << m << " with " << bad << " gave token " << t.token;
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("step 7"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
        }
      }
    }
  }
}

// A penalty applied to a huge logit must not make it infinite (which left no candidate).
TEST(Sampler, RepetitionPenaltyNeverMakesALogitInfinite) {
  const std::vector<float> l = {3e38f, 1.0f, -3e38f};
  const std::vector<int32_t> seen = {0, 2};
  for (const float penalty : {0.001f, 100.0f}) {
    for (const float temperature : {0.0f, 0.8f}) {
      SamplingParams p = warm(temperature);
      p.repetition_penalty = penalty;
      p.min_p = 0.05f;
      Sampler s;
      const SampledToken t = s.sample(l, p, seen, 0);
      EXPECT_GE(t.token, 0);
      EXPECT_LT(t.token, 3);
      EXPECT_TRUE(std::isfinite(t.logprob));
    }
  }
}

}  // namespace
}  // namespace hearth
