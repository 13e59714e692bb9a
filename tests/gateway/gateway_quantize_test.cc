// issue 25 through the gateway: --quantize fp8 reaches the gateway's own weight server (its
// greedy logprobs are those of fp8 weights, not the 16-bit ones), and an engine profile may
// set kv_cache_dtype fp8_e4m3 (its workers' fp8 KV changes the logprobs too).
#include <fstream>

#include <gtest/gtest.h>

#include "tests/gateway/gateway_process.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {
namespace {

// Greedy completion of one prompt: the text and every token's logprob.
std::pair<std::string, std::vector<double>> complete(const GatewayProcess& g,
                                                     const std::string& model) {
  const auto r = g.post("/v1/completions", {{"model", model},
                                            {"prompt", "A computer"},
                                            {"max_tokens", 12},
                                            {"temperature", 0},
                                            {"logprobs", 1}});
  EXPECT_EQ(r.status, 200) << r.body;
  const json j = r.parsed();
  const json& choice = j["choices"][0];
  return {choice["text"].get<std::string>(),
          choice["logprobs"]["token_logprobs"].get<std::vector<double>>()};
}

TEST(GatewayQuantize, Fp8WeightsAndAnFp8KvProfileEachChangeTheLogprobs) {
  TempDir dir;
  const auto profile = dir / "fp8kv.json";
  std::ofstream(profile) << R"({"name": "fp8kv", "kv_cache_dtype": "fp8_e4m3"})";
  const std::string profile_arg = "fp8kv=" + profile.string();
  GatewayProcess plain({"--profile", profile_arg});
  GatewayProcess fp8({"--quantize", "fp8"});
  const auto bf16_run = complete(plain, "fortunes");
  const auto fp8_kv_run = complete(plain, "fortunes:fp8kv");
  const auto fp8_run = complete(fp8, "fortunes");
  ASSERT_FALSE(bf16_run.second.empty());
  ASSERT_FALSE(fp8_kv_run.second.empty());
  ASSERT_FALSE(fp8_run.second.empty());
  EXPECT_NE(fp8_run.second, bf16_run.second);
  EXPECT_NE(fp8_kv_run.second, bf16_run.second);
  // The same request again gives the same bits: what differed was the numerics, not chance.
  EXPECT_EQ(complete(plain, "fortunes:fp8kv"), fp8_kv_run);
  EXPECT_EQ(complete(fp8, "fortunes"), fp8_run);
}

}  // namespace
}  // namespace hearth::test
