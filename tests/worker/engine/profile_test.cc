#include "worker/engine/profile.h"

#include <gtest/gtest.h>

#include <fstream>

#include "worker/engine/request.h"

namespace hearth {
namespace {

using json = nlohmann::json;

void expect_refused(const json& obj, const std::string& fragment) {
  Profile p;
  try {
    apply_profile_json(p, obj, "p.json");
    FAIL() << "accepted " << obj.dump();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("p.json"), std::string::npos) << e.what();
  }
}

TEST(Profile, AppliesKnownKeys) {
  Profile p;
  apply_profile_json(p,
                     {{"temperature", 0.7},
                      {"top_k", 40},
                      {"top_p", 0.9},
                      {"min_p", 0.05},
                      {"repetition_penalty", 1.1},
                      {"seed", 42},
                      {"max_tokens", 12},
                      {"stop", "\n\n"},
                      {"backend", "cpu"},
                      {"context_length", 256},
                      {"cuda_graphs", false},
                      {"weights_layout", "packed"}},
                     "x");
  EXPECT_FLOAT_EQ(p.request.sampling.temperature, 0.7f);
  EXPECT_EQ(p.request.sampling.top_k, 40);
  EXPECT_EQ(p.request.sampling.seed, 42u);
  EXPECT_EQ(p.request.max_tokens, 12);
  EXPECT_EQ(p.request.stop, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(p.engine.backend, "cpu");
  EXPECT_FALSE(p.engine.cuda_graphs);
  EXPECT_EQ(p.engine.weights_layout, "packed");
}

TEST(Profile, RefusesUnknownKeysWrongTypesAndRanges) {
  expect_refused({{"temprature", 0.5}}, "unknown profile key 'temprature'");
  expect_refused({{"temperature", "hot"}}, "'temperature': must be a number");
  expect_refused({{"temperature", -1}}, "'temperature': must be in");
  expect_refused({{"top_p", 0}}, "'top_p'");
  expect_refused({{"top_k", 1.5}}, "'top_k': must be an integer");
  expect_refused({{"seed", -3}}, "'seed'");
  expect_refused({{"backend", "gpu"}}, "must be one of auto, cpu, cuda");
  expect_refused({{"stop", {""}}}, "'stop'");
  expect_refused({{"cuda_graphs", 1}}, "must be true or false");
  Profile p;
  EXPECT_THROW(apply_profile_json(p, json::array(), "p.json"), std::runtime_error);
}

TEST(Profile, RoundTripsThroughJsonWithTheNumbersAsWritten) {
  Profile p;
  apply_profile_json(p, {{"temperature", 0.8}, {"top_p", 0.95}, {"seed", 7}, {"stop", {"a", "b"}}},
                     "x");
  const json j = profile_to_json(p);
  EXPECT_EQ(j["temperature"].dump(), "0.8");  // not 0.800000011920929
  EXPECT_EQ(j["top_p"].dump(), "0.95");
  Profile q;
  apply_profile_json(q, j, "round trip");
  EXPECT_EQ(profile_to_json(q), j);
}

TEST(Profile, RequestSettingsTakeOnlyRequestKeys) {
  RequestSettings r;
  apply_request_json(r, {{"temperature", 0.5}, {"max_tokens", 3}, {"stop", "x"}}, "request 7");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.max_tokens, 3);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  for (const char* engine_key : {"backend", "context_length", "cuda_graphs"}) {
    try {
      apply_request_json(r, {{engine_key, json()}}, "request 7");
      ADD_FAILURE() << engine_key << " was accepted as a request setting";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("is an engine option"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(apply_request_json(r, {{"name", "x"}}, "request 7"), std::runtime_error);
  EXPECT_THROW(apply_request_json(r, {{"temperature", -1}}, "request 7"), std::runtime_error);
  EXPECT_EQ(r.max_tokens, 3);  // unchanged by the refused ones
}

TEST(Profile, BatchingKeys) {
  Profile p;
  apply_profile_json(p,
                     {{"logprobs", 5},
                      {"cache_salt", "tenant-a"},
                      {"kv_block_size", 32},
                      {"kv_pool_tokens", 100000},
                      {"kv_pool_gb", 1.5},
                      {"max_batch_tokens", 512},
                      {"max_running", 64}},
                     "x");
  EXPECT_EQ(p.request.logprobs, 5);
  EXPECT_EQ(p.request.cache_salt, "tenant-a");
  EXPECT_EQ(p.engine.kv_block_size, 32);
  EXPECT_EQ(p.engine.kv_pool_tokens, 100000);
  EXPECT_EQ(p.engine.kv_pool_gb, 1.5);
  EXPECT_EQ(p.engine.max_batch_tokens, 512);
  EXPECT_EQ(p.engine.max_running, 64);
  Profile q;
  apply_profile_json(q, profile_to_json(p), "round trip");
  EXPECT_EQ(profile_to_json(q), profile_to_json(p));

  expect_refused({{"logprobs", 21}}, "'logprobs': must be in [0, 20]");
  expect_refused({{"cache_salt", 3}}, "'cache_salt': must be a string");
  expect_refused({{"kv_block_size", 0}}, "'kv_block_size'");
  expect_refused({{"max_batch_tokens", 0}}, "'max_batch_tokens'");
  expect_refused({{"max_running", 0}}, "'max_running'");
  expect_refused({{"kv_pool_gb", -1}}, "'kv_pool_gb'");
  RequestSettings r;
  EXPECT_THROW(apply_request_json(r, {{"max_running", 4}}, "request 7"), std::runtime_error);
  apply_request_json(r, {{"logprobs", 2}, {"cache_salt", "s"}}, "request 7");
  EXPECT_EQ(r.logprobs, 2);
}

// The engine checks requests built in code with the ranges profiles enforce on JSON.
TEST(Profile, TheEngineAcceptsExactlyWhatRequestKeysAccept) {
  const std::pair<const char*, json> edges[] = {{"temperature", 0},
                                                {"temperature", 100},
                                                {"temperature", 100.5},
                                                {"temperature", -0.1},
                                                {"top_k", 0},
                                                {"top_k", 1 << 30},
                                                {"top_k", -1},
                                                {"top_p", 1e-6},
                                                {"top_p", 1},
                                                {"top_p", 0},
                                                {"top_p", 1.01},
                                                {"min_p", 0},
                                                {"min_p", 1},
                                                {"min_p", -0.1},
                                                {"repetition_penalty", 1e-3},
                                                {"repetition_penalty", 100},
                                                {"repetition_penalty", 0},
                                                {"max_tokens", 0},
                                                {"max_tokens", 1 << 24},
                                                {"max_tokens", -1},
                                                {"logprobs", 0},
                                                {"logprobs", 20},
                                                {"logprobs", 21},
                                                {"repetition_penalty", 101}};
  for (const auto& [key, value] : edges) {
    RequestSettings r;
    bool profile_ok = true;
    try {
      apply_request_json(r, {{key, value}}, "edge");
    } catch (const std::runtime_error&) {
      profile_ok = false;
    }
    // Set the raw value directly, as code would, and ask the engine's check.
    Profile direct;
    if (profile_ok) direct.request = r;
    bool engine_ok = true;
    if (!profile_ok) {
      RequestSettings raw;
      const std::string k = key;
      const double v = value.get<double>();
      if (k == "temperature") raw.sampling.temperature = float(v);
      if (k == "top_k") raw.sampling.top_k = int(v);
      if (k == "top_p") raw.sampling.top_p = float(v);
      if (k == "min_p") raw.sampling.min_p = float(v);
      if (k == "repetition_penalty") raw.sampling.repetition_penalty = float(v);
      if (k == "max_tokens") raw.max_tokens = int(v);
      if (k == "logprobs") raw.logprobs = int(v);
      direct.request = raw;
    }
    try {
      check_request_settings("edge", direct.request);
    } catch (const RequestError& e) {
      engine_ok = false;
      EXPECT_EQ(e.field(), key);
    }
    EXPECT_EQ(engine_ok, profile_ok) << key << " = " << value.dump();
  }
}

TEST(Profile, FileErrorsNameTheFile) {
  const std::string path = testing::TempDir() + "/bad_profile.json";
  std::ofstream(path) << "{ not json";
  try {
    load_profile_file(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad_profile.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_profile_file(testing::TempDir() + "/no_such_profile.json"), std::runtime_error);
}

// Issue 21: a profile starting with NUL read as "unexpected end of input".
TEST(Profile, ANulByteIsNamedWithItsOffset) {
  const std::string path = testing::TempDir() + "/nul_profile.json";
  std::ofstream(path, std::ios::binary) << std::string(1, '\0') << R"({"temperature": 0})";
  try {
    load_profile_file(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "nul_profile.json: invalid JSON: contains a NUL byte at offset 0"),
              std::string::npos)
        << e.what();
  }
  try {
    parse_profile(std::string(R"({"temperature": 0})") + '\0', "inline");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("NUL byte at offset 18"), std::string::npos) << e.what();
  }
}

// Issue 12: a deeply nested value used to crash the worker while the error message printed it.
TEST(Profile, DeeplyNestedValuesAreRefusedWithoutRecursing) {
  const std::string path = testing::TempDir() + "/deep_profile.json";
  std::ofstream(path) << "{\"temperature\": " << std::string(100000, '[')
                      << std::string(100000, ']') << "}";
  try {
    load_profile_file(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("deep_profile.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hearth
