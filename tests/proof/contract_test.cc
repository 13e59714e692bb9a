// Contracts: parsing, and comparisons under each of them (where the first divergence is, what
// counts as a violation, the text around it).
#include <gtest/gtest.h>

#include <cmath>

#include "proof/contract.h"

namespace hearth::proof {
namespace {

Generation gen(std::vector<int32_t> tokens, std::vector<double> logprobs = {},
               std::vector<std::string> pieces = {}) {
  Generation g;
  g.tokens = tokens;
  g.logprobs = logprobs.empty() ? std::vector<double>(tokens.size(), -1.0) : logprobs;
  if (pieces.empty())
    for (int32_t t : tokens) pieces.push_back("<" + std::to_string(t) + ">");
  g.pieces = pieces;
  g.prompt_tokens = 5;
  g.stop = "length";
  return g;
}

Comparison cmp(const std::string& contract, const Generation& a, const Generation& b) {
  return compare(Contract::parse(contract), a, b, a.streamed_text(), b.streamed_text());
}

TEST(Contract, ParsesTheThreeKinds) {
  EXPECT_EQ(Contract::parse("exact").kind, Contract::Kind::Exact);
  EXPECT_EQ(Contract::parse("text").kind, Contract::Kind::Text);
  const Contract c = Contract::parse("logprob:1e-4");
  EXPECT_EQ(c.kind, Contract::Kind::Logprob);
  EXPECT_DOUBLE_EQ(c.epsilon, 1e-4);
  EXPECT_EQ(c.name(), "logprob:1e-04");
  EXPECT_EQ(Contract::parse(c.name()).epsilon, c.epsilon);
  EXPECT_EQ(Contract::parse("logprob:0.1").name(), "logprob:0.1");
  EXPECT_EQ(Contract::parse("logprob:0").epsilon, 0.0);
}

TEST(Contract, RejectsUnknownOrMalformedContracts) {
  for (const char* bad : {"", "Exact", "tokens", "logprob", "logprob:", "logprob:-1", "logprob:abc",
                          "logprob:1e-4x", "logprob:inf", "logprob:nan"}) {
    try {
      Contract::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("contract"), std::string::npos) << e.what();
    }
  }
}

TEST(Compare, IdenticalOutputsHoldUnderEveryContract) {
  const Generation a = gen({10, 11, 12});
  for (const char* c : {"exact", "text", "logprob:0"}) {
    const Comparison r = cmp(c, a, a);
    EXPECT_TRUE(r.holds) << c;
    EXPECT_TRUE(r.reason.empty());
    EXPECT_FALSE(r.tokens);
    EXPECT_FALSE(r.text);
    EXPECT_EQ(r.max_logprob_delta, 0.0);
  }
}

TEST(Compare, FindsTheFirstDifferingTokenWithContext) {
  const Generation a = gen({1, 2, 3, 4, 5}, {}, {"a", "b", "c", "d", "e"});
  const Generation b = gen({1, 2, 9, 4, 5}, {}, {"a", "b", "X", "d", "e"});
  const Comparison r = cmp("exact", a, b);
  EXPECT_FALSE(r.holds);
  ASSERT_TRUE(r.tokens);
  EXPECT_EQ(r.tokens->index, 2u);
  EXPECT_EQ(r.tokens->a_token, 3);
  EXPECT_EQ(r.tokens->b_token, 9);
  EXPECT_EQ(r.tokens->before, "ab");
  EXPECT_EQ(r.tokens->a_next, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(r.tokens->b_next, (std::vector<int32_t>{9, 4, 5}));
  EXPECT_EQ(r.tokens->a_text, "cde");
  EXPECT_EQ(r.tokens->b_text, "Xde");
  EXPECT_NE(r.reason.find("index 2"), std::string::npos) << r.reason;
  ASSERT_TRUE(r.text);
  EXPECT_EQ(r.text->offset, 2u);
}

TEST(Compare, AnOutputThatEndsEarlyDivergesWhereItEnds) {
  const Generation a = gen({1, 2, 3}), b = gen({1, 2});
  const Comparison r = cmp("exact", a, b);
  EXPECT_FALSE(r.holds);
  ASSERT_TRUE(r.tokens);
  EXPECT_EQ(r.tokens->index, 2u);
  EXPECT_EQ(r.tokens->a_token, 3);
  EXPECT_FALSE(r.tokens->b_token);
  EXPECT_NE(r.reason.find("end of output"), std::string::npos) << r.reason;
  // Both empty: nothing differs.
  EXPECT_TRUE(cmp("exact", gen({}), gen({})).holds);
}

TEST(Compare, TextContractHoldsForDifferentTokensWithTheSameText) {
  const Generation a = gen({1, 2}, {}, {"he", "llo"}), b = gen({7}, {}, {"hello"});
  EXPECT_FALSE(cmp("exact", a, b).holds);
  const Comparison r = cmp("text", a, b);
  EXPECT_TRUE(r.holds) << r.reason;
  EXPECT_TRUE(r.tokens);  // still reported
  const Comparison differs = cmp("text", a, gen({7}, {}, {"help"}));
  EXPECT_FALSE(differs.holds);
  ASSERT_TRUE(differs.text);
  EXPECT_EQ(differs.text->offset, 3u);
  EXPECT_EQ(differs.text->before, "hel");
  EXPECT_EQ(differs.text->a_after, "lo");
  EXPECT_EQ(differs.text->b_after, "p");
}

TEST(Compare, TextDivergenceStartsOnACharacterBoundary) {
  // "é" is C3 A9 and "è" is C3 A8: they differ in the second byte; the divergence is reported
  // at the first, where the character starts.
  const Comparison r = cmp("text", gen({1}, {}, {"caf\xC3\xA9"}), gen({2}, {}, {"caf\xC3\xA8"}));
  ASSERT_TRUE(r.text);
  EXPECT_EQ(r.text->offset, 3u);
  EXPECT_EQ(r.text->a_after, "\xC3\xA9");
  EXPECT_EQ(r.text->b_after, "\xC3\xA8");
}

TEST(Compare, LogprobContractChecksEveryPositionAgainstEpsilon) {
  const Generation a = gen({1, 2, 3}, {-1.0, -2.0, -3.0});
  const Generation b = gen({1, 2, 3}, {-1.0, -2.00005, -3.001});
  EXPECT_TRUE(cmp("exact", a, b).holds);                           // exact ignores logprobs...
  EXPECT_NEAR(cmp("exact", a, b).max_logprob_delta, 0.001, 1e-9);  // ...but reports them
  EXPECT_TRUE(cmp("logprob:0.01", a, b).holds);
  const Comparison r = cmp("logprob:1e-4", a, b);
  EXPECT_FALSE(r.holds);
  ASSERT_TRUE(r.logprob_index);
  EXPECT_EQ(*r.logprob_index, 2u);
  const Comparison strict = cmp("logprob:0", a, b);
  EXPECT_EQ(*strict.logprob_index, 1u);
  // Different tokens break it whatever the epsilon.
  EXPECT_FALSE(cmp("logprob:100", a, gen({1, 2, 4}, {-1.0, -2.0, -3.0})).holds);
}

TEST(Compare, MissingLogprobsOnOneSideOnlyAreADifference) {
  const double nan = std::nan("");
  const Generation a = gen({1, 2}, {-1.0, nan}), both = gen({1, 2}, {-1.0, nan}),
                   b = gen({1, 2}, {-1.0, -2.0});
  EXPECT_TRUE(cmp("logprob:0", a, both).holds);
  EXPECT_FALSE(cmp("logprob:1000", a, b).holds);
}

TEST(Compare, DifferentPromptTokenCountsBreakEveryContract) {
  const Generation a = gen({1, 2});
  Generation b = a;
  b.prompt_tokens = 6;
  for (const char* c : {"exact", "text", "logprob:1"}) {
    const Comparison r = cmp(c, a, b);
    EXPECT_FALSE(r.holds) << c;
    EXPECT_NE(r.reason.find("prompt token counts differ (5 vs 6)"), std::string::npos) << r.reason;
  }
}

TEST(Compare, JsonCarriesTheDivergence) {
  const nlohmann::json j = to_json(cmp("exact", gen({1, 2}), gen({1, 3})));
  EXPECT_EQ(j["holds"], false);
  EXPECT_EQ(j["first_divergence"]["index"], 1);
  EXPECT_EQ(j["first_divergence"]["a_token"], 2);
  EXPECT_EQ(j["first_divergence"]["b_token"], 3);
  EXPECT_TRUE(to_json(cmp("exact", gen({1}), gen({1})))["first_divergence"].is_null());
}

}  // namespace
}  // namespace hearth::proof
