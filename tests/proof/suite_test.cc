// Suites and profiles are checked before any worker starts: every mistake names the file, the
// line (suites) or the key (profiles).
#include <gtest/gtest.h>

#include "proof/profile_set.h"
#include "proof/suite.h"
#include "proof_test_util.h"

namespace hearth::proof {
namespace {

using testing::TempDir;
using testing::write_file;

class SuiteTest : public ::testing::Test {
 protected:
  Suite load(const std::string& content) {
    write_file(dir_ / "s.jsonl", content);
    return load_suite(dir_ / "s.jsonl");
  }
  void expect_error(const std::string& content, const std::string& message) {
    try {
      load(content);
      ADD_FAILURE() << "accepted: " << content;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  TempDir dir_;
};

TEST_F(SuiteTest, ReadsPromptsTokensLimitsAndMeta) {
  const Suite s = load(
      "{\"id\":\"a\",\"prompt\":\"Hello\"}\n"
      "\n"
      "{\"id\":7,\"prompt_tokens\":[0,5,9],\"max_tokens\":3,\"meta\":{\"lang\":\"en\"}}\r\n");
  ASSERT_EQ(s.prompts.size(), 2u);
  EXPECT_EQ(s.name, "s");
  EXPECT_EQ(s.checksum.size(), 32u);
  EXPECT_EQ(s.prompts[0].id, "a");
  EXPECT_EQ(*s.prompts[0].text, "Hello");
  EXPECT_FALSE(s.prompts[0].max_tokens);
  EXPECT_EQ(s.prompts[1].id, "7");
  EXPECT_FALSE(s.prompts[1].text);
  EXPECT_EQ(s.prompts[1].tokens, (std::vector<int32_t>{0, 5, 9}));
  EXPECT_EQ(*s.prompts[1].max_tokens, 3);
  EXPECT_EQ(s.prompts[1].meta["lang"], "en");
  EXPECT_EQ(s.prompts[1].line, 3u);
}

TEST_F(SuiteTest, ChecksumChangesWithTheContent) {
  const std::string a = load("{\"id\":\"a\",\"prompt\":\"x\"}\n").checksum;
  EXPECT_NE(a, load("{\"id\":\"a\",\"prompt\":\"y\"}\n").checksum);
}

TEST_F(SuiteTest, RefusesBadLinesNamingTheLine) {
  const std::string ok = "{\"id\":\"ok\",\"prompt\":\"x\"}\n";
  expect_error(ok + "{\"id\":\"b\",\n", "s.jsonl:2: invalid JSON");
  expect_error(ok + "[1,2]\n", "s.jsonl:2: each line must be a JSON object");
  expect_error(ok + "{\"prompt\":\"x\"}\n", "s.jsonl:2: missing \"id\"");
  expect_error(ok + "{\"id\":\"\",\"prompt\":\"x\"}\n", "\"id\" must be a non-empty string");
  expect_error(ok + ok, "s.jsonl:2: duplicate id \"ok\"");
  expect_error("{\"id\":\"a\"}\n", "s.jsonl:1: missing \"prompt\"");
  expect_error("{\"id\":\"a\",\"prompt\":\"x\",\"prompt_tokens\":[1]}\n", "not both");
  expect_error("{\"id\":\"a\",\"prompt\":\"\"}\n", "\"prompt\" must be a non-empty string");
  expect_error("{\"id\":\"a\",\"prompt\":3}\n", "\"prompt\" must be a non-empty string");
  expect_error("{\"id\":\"a\",\"prompt\":\"a\\u0000b\"}\n", "NUL");
  expect_error("{\"id\":\"a\",\"prompt_tokens\":[]}\n", "non-empty array");
  expect_error("{\"id\":\"a\",\"prompt_tokens\":[1,-2]}\n", "holds -2, not a token id");
  expect_error("{\"id\":\"a\",\"prompt_tokens\":[1,2.5]}\n", "not a token id");
  expect_error("{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":0}\n",
               "\"max_tokens\" must be an integer in [1");
  expect_error("{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":\"5\"}\n",
               "\"max_tokens\" must be an integer");
  expect_error("{\"id\":\"a\",\"prompt\":\"x\",\"max_token\":5}\n", "unknown key \"max_token\"");
  expect_error("", "the suite has no prompts");
  expect_error("\n  \n", "the suite has no prompts");
  expect_error("{\"id\":\"a\",\"prompt\":\"caf\xC3\"}\n", "not valid UTF-8 at offset 23");
  // Issue 21: nlohmann reads NUL as the end of input ("unexpected end of input").
  expect_error(std::string(1, '\0') + "{\"id\":\"a\",\"prompt\":\"x\"}\n",
               "s.jsonl:1: invalid JSON: contains a NUL byte at offset 0");
}

TEST_F(SuiteTest, RefusesPromptsTooLongForACommandLine) {
  expect_error("{\"id\":\"a\",\"prompt\":\"" + std::string(kMaxPromptArgBytes + 1, 'x') + "\"}\n",
               "more than the 102400 a worker's command line can carry");
  std::string ids = "1";
  for (int i = 0; i < 30000; ++i) ids += ",12345";
  expect_error("{\"id\":\"a\",\"prompt_tokens\":[" + ids + "]}\n", "too long to pass to a worker");
}

TEST_F(SuiteTest, MissingFileIsAnError) {
  try {
    load_suite(dir_ / "nope.jsonl");
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.jsonl: cannot open"), std::string::npos) << e.what();
  }
}

TEST(TokenLimit, TheSmallerOfThePromptsCapAndTheBudget) {
  SuitePrompt p;
  EXPECT_FALSE(token_limit(p, std::nullopt));
  EXPECT_EQ(token_limit(p, 256), 256);
  p.max_tokens = 16;
  EXPECT_EQ(token_limit(p, std::nullopt), 16);
  EXPECT_EQ(token_limit(p, 256), 16);
  EXPECT_EQ(token_limit(p, 8), 8);
}

TEST(BuiltInSuites, LoadAndHoldWhatTheReadmeSays) {
  const auto dir = hearth::test::source_dir() / "proof" / "suites";
  for (const char* name : {"short", "code", "multilingual", "long"}) {
    const Suite s = load_suite(dir / (std::string(name) + ".jsonl"));
    EXPECT_GE(s.prompts.size(), 8u) << name;
    for (const SuitePrompt& p : s.prompts) EXPECT_TRUE(p.text) << name << " " << p.id;
  }
  // The long suite's prompts are 2k-4k tokens long in every tokenizer its generator counted with.
  for (const SuitePrompt& p : load_suite(dir / "long.jsonl").prompts) {
    ASSERT_TRUE(p.meta.contains("tokens")) << p.id;
    for (const auto& [tokenizer, n] : p.meta["tokens"].items()) {
      EXPECT_GE(n.get<int>(), 2048) << p.id << " " << tokenizer;
      EXPECT_LE(n.get<int>(), 3840) << p.id << " " << tokenizer;
    }
  }
}

class ProfileTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(ProfileTest, LoadsWithDefaultsAndUniqueLabels) {
  write_file(dir_ / "a.json", R"({"temperature": 0})");
  write_file(dir_ / "b.json", R"({"name": "fast", "seed": 3})");
  const auto p = load_profiles({dir_ / "a.json", dir_ / "b.json", dir_ / "a.json"});
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].label, "a");
  EXPECT_EQ(p[1].label, "fast");
  EXPECT_EQ(p[2].label, "a#2");
  EXPECT_TRUE(p[0].path.is_absolute());
  EXPECT_EQ(p[0].settings["temperature"], 0.0);
  EXPECT_EQ(p[0].settings["top_p"], 1.0);  // a default, filled in
  EXPECT_EQ(p[1].settings["seed"], 3);
  EXPECT_EQ(p[0].checksum, p[2].checksum);
  EXPECT_NE(p[0].checksum, p[1].checksum);
}

TEST_F(ProfileTest, RefusesWhatTheWorkerWouldRefuse) {
  auto expect_error = [&](const std::string& content, const std::string& message) {
    write_file(dir_ / "p.json", content);
    try {
      load_profiles({dir_ / "p.json"});
      ADD_FAILURE() << "accepted: " << content;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("p.json"), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"temprature": 0.5})", "unknown profile key 'temprature'");
  expect_error(R"({"top_p": 2})", "profile key 'top_p'");
  expect_error(R"({"backend": "tpu"})", "profile key 'backend'");
  expect_error(R"({"seed": -1})", "profile key 'seed'");
  expect_error("{nope", "invalid JSON");
  expect_error("[1]", "must be a JSON object");
  try {
    load_profiles({dir_ / "missing.json"});
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json: no such profile file"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hearth::proof
