#include "weight-server/model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include <nlohmann/json.hpp>

namespace hearth {
namespace {

using json = nlohmann::json;

json llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 100},
          {"rms_norm_eps", 1e-5},
          {"hidden_act", "silu"}};
}

void expect_refused(const json& cfg, const std::string& fragment) {
  try {
    parse_model_config(cfg, "config.json");
    FAIL() << "accepted, expected refusal mentioning " << fragment;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, ParsesLlamaWithDefaults) {
  ModelConfig c = parse_model_config(llama(), "x");
  EXPECT_EQ(c.arch, Architecture::Llama);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::None);
}

TEST(ModelConfig, ArchitectureVariants) {
  json q2 = llama();
  q2["architectures"] = {"Qwen2ForCausalLM"};
  EXPECT_TRUE(parse_model_config(q2, "x").qkv_bias);
  json q3 = llama();
  q3["architectures"] = {"Qwen3ForCausalLM"};
  q3["head_dim"] = 32;
  ModelConfig c3 = parse_model_config(q3, "x");
  EXPECT_TRUE(c3.qk_norm);
  EXPECT_EQ(c3.head_dim, 32);
  EXPECT_EQ(c3.q_dim(), 128);
  json m = llama();
  m["architectures"] = {"MistralForCausalLM"};
  m["sliding_window"] = 512;
  EXPECT_EQ(parse_model_config(m, "x").sliding_window, 512);
}

TEST(ModelConfig, RefusesWhatItDoesNotImplement) {
  json c = llama();
  c["architectures"] = {"GPT2LMHeadModel"};
  expect_refused(c, "unsupported architecture GPT2LMHeadModel");
  c = llama();
  c["hidden_act"] = "gelu";
  expect_refused(c, "hidden_act");
  c = llama();
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_refused(c, "unsupported rope scaling type 'yarn'");
  c = llama();
  c["attention_bias"] = true;
  expect_refused(c, "attention_bias");
  c = llama();
  c["mlp_bias"] = true;
  expect_refused(c, "mlp_bias");
  c = llama();
  c["num_key_value_heads"] = 3;
  expect_refused(c, "multiple of num_key_value_heads");
  c = llama();
  c.erase("hidden_size");
  expect_refused(c, "missing hidden_size");
  c = llama();
  c["vocab_size"] = -5;
  expect_refused(c, "vocab_size");
  c = llama();
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["use_sliding_window"] = true;
  expect_refused(c, "use_sliding_window");
}

// Issue 12: sizes whose products wrapped passed every check (1024 heads x head_dim 4194304
// made q_dim 0, and the CPU engine then wrote through a null pointer).
// Issue 21: eos ids [99999999999, -5] and bos_token_id "x" were accepted (dropped or wrapped).
TEST(ModelConfig, TokenIdsMustBeWithinTheVocabulary) {
  json c = llama();
  c["bos_token_id"] = 1;
  c["eos_token_id"] = json::array({2, 99});
  ModelConfig parsed = parse_model_config(c, "x");
  EXPECT_EQ(parsed.bos_ids, std::vector<int>{1});
  EXPECT_EQ(parsed.eos_ids, (std::vector<int>{2, 99}));
  c["bos_token_id"] = nullptr;  // HF writes null for "none"
  EXPECT_TRUE(parse_model_config(c, "x").bos_ids.empty());

  const std::string bound = "integers from 0 to 99, below the model's vocab_size 100";
  c["eos_token_id"] = json::parse("[99999999999, -5]");
  expect_refused(c, "eos_token_id 99999999999 is outside the vocabulary");
  expect_refused(c, bound);
  c["eos_token_id"] = json::array({2, -5});
  expect_refused(c, "eos_token_id -5 is outside the vocabulary");
  c["eos_token_id"] = 100;
  expect_refused(c, "eos_token_id 100 is outside the vocabulary (token ids are " + bound);
  c["eos_token_id"] = json::parse("18446744073709551615");
  expect_refused(c, "eos_token_id 18446744073709551615 is outside the vocabulary");
  c["eos_token_id"] = 2;
  c["bos_token_id"] = "x";
  expect_refused(c, "bos_token_id must be a token id or a list of them, got string \"x\"");
  c["bos_token_id"] = json::array({1.5});
  expect_refused(c, "bos_token_id must be a token id or a list of them, got number 1.5");
}

TEST(ModelConfig, RefusesSizesWhoseProductsOverflow) {
  json c = llama();
  c["num_attention_heads"] = 1024;
  c["num_key_value_heads"] = 1024;
  c["head_dim"] = 4194304;
  expect_refused(c, "head_dim");
  c = llama();
  c["hidden_size"] = 1 << 30;
  c["num_attention_heads"] = 1 << 20;
  expect_refused(c, "hidden_size");
  c = llama();
  c["vocab_size"] = 1 << 30;
  expect_refused(c, "vocab_size");
  c = llama();
  c["intermediate_size"] = (1 << 30) - 1;
  expect_refused(c, "intermediate_size");
  // A float that does not fit an int was converted anyway (undefined behaviour).
  c = llama();
  c["rope_scaling"] = {
      {"rope_type", "llama3"}, {"factor", 8.0}, {"original_max_position_embeddings", 1e30}};
  expect_refused(c, "original_max_position_embeddings");
  c["rope_scaling"]["original_max_position_embeddings"] = 8192;
  c["rope_scaling"]["low_freq_factor"] = 0;
  expect_refused(c, "low_freq_factor");
}

// Issue 12: 2^30 layers passed, and the list of expected tensors then grew to gigabytes.
TEST(ModelConfig, LayerCountIsBoundedBeforeAnythingIsAllocated) {
  json c = llama();
  c["hidden_size"] = 2;  // a few parameters per layer: the parameter bound alone lets it pass
  c["intermediate_size"] = 1;
  c["num_attention_heads"] = 1;
  c["num_key_value_heads"] = 1;
  c["vocab_size"] = 2;
  c["num_hidden_layers"] = 1073741824;
  expect_refused(c, "num_hidden_layers");
  c["num_hidden_layers"] = 126;  // Llama 3.1 405B
  EXPECT_EQ(parse_model_config(c, "x").n_layers, 126);
}

// Found by fuzzing (issue 12): a rope_theta or scaling factor of 1e-320 passed as positive and
// made the inverse frequencies infinite.
TEST(ModelConfig, RopeSettingsThatOverflowTheFrequenciesAreRefused) {
  json c = llama();
  c["rope_theta"] = 1e-320;
  expect_refused(c, "rope_theta");
  c = llama();
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 1e-320}};
  expect_refused(c, "not finite");
  c["rope_scaling"]["factor"] = 1e-3;  // odd, but finite
  EXPECT_NO_THROW(parse_model_config(c, "x"));
}

TEST(ModelConfig, ReadsRopeInBothSpellings) {
  json old = llama();
  old["rope_theta"] = 500000.0;
  old["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  json v5 = llama();
  v5["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                           {"factor", 8.0},           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  for (const json& cfg : {old, v5}) {
    ModelConfig c = parse_model_config(cfg, "x");
    EXPECT_EQ(c.rope_theta, 500000.0);
    EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::Llama3);
    EXPECT_EQ(c.rope_scaling.factor, 8.0);
    EXPECT_EQ(c.rope_scaling.original_max_position, 8192);
  }
}

TEST(ModelConfig, Llama3FrequenciesFollowTheThreeBands) {
  json cfg = llama();
  cfg["hidden_size"] = 512;
  cfg["num_attention_heads"] = 4;  // head_dim 128
  cfg["rope_theta"] = 500000.0;
  ModelConfig plain = parse_model_config(cfg, "x");
  cfg["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  ModelConfig scaled = parse_model_config(cfg, "x");
  auto base = rope_inverse_frequencies(plain);
  auto inv = rope_inverse_frequencies(scaled);
  ASSERT_EQ(inv.size(), 64u);
  int high = 0, low = 0, mid = 0;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / base[i];
    if (wavelen < 8192 / 4.0) {
      EXPECT_FLOAT_EQ(inv[i], base[i]);  // high frequencies untouched
      ++high;
    } else if (wavelen > 8192 / 1.0) {
      EXPECT_FLOAT_EQ(inv[i], base[i] / 8.0f);  // low frequencies slowed by the factor
      ++low;
    } else {
      EXPECT_LT(inv[i], base[i]);
      EXPECT_GT(inv[i], base[i] / 8.0f);
      ++mid;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_FLOAT_EQ(base[0], 1.0f);
  EXPECT_NEAR(base[1], 1.0 / std::pow(500000.0, 2.0 / 128), 1e-6);
}

}  // namespace
}  // namespace hearth
