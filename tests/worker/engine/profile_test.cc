#include "worker/engine/profile.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/temp_dir.h"
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
  EXPECT_EQ(p.engine.backend, BackendKind::Cpu);
  EXPECT_FALSE(p.engine.cuda_graphs);
  EXPECT_EQ(p.engine.weights_layout, WeightsLayout::Packed);
}

TEST(Profile, RefusesUnknownKeysWrongTypesAndEngineOptionRanges) {
  expect_refused({{"temprature", 0.5}}, "unknown profile key 'temprature'");
  expect_refused({{"temperature", "hot"}}, "'temperature': must be a number");
  expect_refused({{"top_k", 1.5}}, "'top_k': must be an integer");
  expect_refused({{"seed", -3}}, "'seed'");
  expect_refused({{"backend", "gpu"}}, "must be one of auto, cpu, cuda");
  expect_refused({{"cuda_engine", "paged"}}, "'cuda_engine': must be one of batched, single");
  expect_refused({{"matmul_tiling", 1}}, "'matmul_tiling': must be one of auto, tuned, got 1");
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

// A served worker's engine profile (hearth-gateway --profile): engine options only, every
// request setting named, since the gateway's requests bring their own (issue 24 item 6).
TEST(Profile, EngineProfilesTakeOnlyEngineKeys) {
  const Profile p = parse_engine_profile(R"({"name": "small", "context_length": 128})", "p");
  EXPECT_EQ(p.name, "small");
  EXPECT_EQ(p.engine.context_length, 128);
  try {
    parse_engine_profile(R"({"backend": "cpu", "temperature": 0.8, "max_tokens": 9})",
                         "--profile x");
    ADD_FAILURE() << "request settings were accepted in an engine profile";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("--profile x: ", 0), 0u) << what;
    EXPECT_NE(what.find("'max_tokens', 'temperature'"), std::string::npos) << what;
  }
  EXPECT_THROW(parse_engine_profile(R"({"nonsense": 1})", "p"), std::runtime_error);
  EXPECT_THROW(parse_engine_profile(R"({"context_length": -1})", "p"), std::runtime_error);
  EXPECT_THROW(parse_engine_profile("[]", "p"), std::runtime_error);
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
                      {"decode_step_tokens", 96},
                      {"max_running", 64}},
                     "x");
  EXPECT_EQ(p.request.logprobs, 5);
  EXPECT_EQ(p.request.cache_salt, "tenant-a");
  EXPECT_EQ(p.engine.kv_block_size, 32);
  EXPECT_EQ(p.engine.kv_pool_tokens, 100000);
  EXPECT_EQ(p.engine.kv_pool_gb, 1.5);
  EXPECT_EQ(p.engine.max_batch_tokens, 512);
  EXPECT_EQ(p.engine.decode_step_tokens, 96);
  EXPECT_EQ(p.engine.max_running, 64);
  Profile q;
  apply_profile_json(q, profile_to_json(p), "round trip");
  EXPECT_EQ(profile_to_json(q), profile_to_json(p));

  expect_refused({{"cache_salt", 3}}, "'cache_salt': must be a string");
  expect_refused({{"kv_block_size", 0}}, "'kv_block_size'");
  expect_refused({{"max_batch_tokens", 0}}, "'max_batch_tokens'");
  expect_refused({{"max_running", 0}}, "'max_running'");
  expect_refused({{"decode_step_tokens", -1}}, "'decode_step_tokens'");
  expect_refused({{"kv_pool_gb", -1}}, "'kv_pool_gb'");
  RequestSettings r;
  EXPECT_THROW(apply_request_json(r, {{"max_running", 4}}, "request 7"), std::runtime_error);
  apply_request_json(r, {{"logprobs", 2}, {"cache_salt", "s"}}, "request 7");
  EXPECT_EQ(r.logprobs, 2);
}

// The ranges are request_settings.h's (request_settings_test.cc holds every edge): a profile
// or a request line reads through them and says their refusal as its key's.
TEST(Profile, RequestKeysSayTheSettingsCheckAsTheirKey) {
  expect_refused({{"temperature", -1}},
                 "p.json: profile key 'temperature': must be in [0, 100], got -1");
  expect_refused({{"top_p", 0}}, "p.json: profile key 'top_p': must be greater than 0");
  expect_refused({{"stop", {"a", ""}}},
                 "p.json: profile key 'stop': stop strings must be non-empty");
  // Too wide for the field's type: refused, never wrapped into range.
  expect_refused({{"top_k", int64_t(1) << 32}},
                 "'top_k': must be in [0, 1073741824], got 4294967296");
  expect_refused({{"max_tokens", UINT64_MAX}}, "'max_tokens': must be in [0, 16777216]");
  RequestSettings r;
  try {
    apply_request_json(r, {{"logprobs", 21}}, "line 3");
    ADD_FAILURE() << "logprobs 21 was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "line 3: profile key 'logprobs': must be in [0, 20], got 21");
  }
  // What a profile accepts, the engine's check of the stored settings accepts too.
  Profile p;
  apply_profile_json(p, {{"temperature", 0.1}, {"top_p", 1e-6}, {"repetition_penalty", 1e-3}}, "x");
  EXPECT_NO_THROW(check_request_settings("edge", p.request));
}

// `--set key=value`, the one parser every binary's flag goes through.
TEST(Profile, SetTakesJsonValuesElseStrings) {
  Profile p;
  apply_profile_setting(p, "temperature=0.5");
  apply_profile_setting(p, "backend=cpu");         // not JSON: the string
  apply_profile_setting(p, "stop=[\"a\",\"b\"]");  // JSON
  apply_profile_setting(p, "cache_salt=");         // empty: the empty string
  EXPECT_FLOAT_EQ(p.request.sampling.temperature, 0.5f);
  EXPECT_EQ(p.engine.backend, BackendKind::Cpu);
  EXPECT_EQ(p.request.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p.request.cache_salt, "");
  for (const char* bad : {"temperature", "=0.5", ""}) {
    try {
      apply_profile_setting(p, bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "--set expects key=value, got '" + std::string(bad) + "'");
    }
  }
  try {
    apply_profile_setting(p, "temprature=1");
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--set: unknown profile key 'temprature'"),
              std::string::npos)
        << e.what();
  }
}

TEST(Profile, FileErrorsNameTheFile) {
  const std::string path = (test::process_scratch_dir() / "bad_profile.json").string();
  std::ofstream(path) << "{ not json";
  try {
    load_profile_file(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad_profile.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_profile_file((test::process_scratch_dir() / "no_such_profile.json").string()),
               std::runtime_error);
}

// Issue 21: a profile starting with NUL read as "unexpected end of input".
TEST(Profile, ANulByteIsNamedWithItsOffset) {
  const std::string path = (test::process_scratch_dir() / "nul_profile.json").string();
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
  const std::string path = (test::process_scratch_dir() / "deep_profile.json").string();
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
