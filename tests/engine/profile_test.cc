#include "worker/engine/profile.h"

#include <gtest/gtest.h>

#include <fstream>

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
