// Structured output through real HTTP: a hearth-gateway on the default model (CPU workers),
// response_format json_schema answers validated by python3-jsonschema, json_object streamed,
// guided_regex on completions, and a schema keyword outside the subset refused as a 400 that
// names it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/gateway/gateway_process.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {
namespace {

class StructuredHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gateway_ = new GatewayProcess(); }
  static void TearDownTestSuite() {
    delete gateway_;
    gateway_ = nullptr;
  }
  static GatewayProcess* gateway_;
};
GatewayProcess* StructuredHttp::gateway_ = nullptr;

// python3-jsonschema's verdict on `instance` (JSON text) under `schema`.
bool validates(const json& schema, const std::string& instance) {
  TempDir dir;
  std::ofstream(dir.path() / "schema.json") << schema.dump();
  std::ofstream(dir.path() / "instance.json") << instance;
  const std::string cmd =
      "python3 -c 'import json, sys, jsonschema; "
      "jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))' " +
      (dir.path() / "schema.json").string() + " " + (dir.path() / "instance.json").string();
  return std::system(cmd.c_str()) == 0;
}

TEST_F(StructuredHttp, JsonSchemaAnswersValidate) {
  const json schema = json::parse(R"({"type": "object", "properties": {
      "fortune": {"type": "string", "maxLength": 40},
      "lucky": {"type": "integer", "minimum": 1, "maximum": 99},
      "mood": {"enum": ["good", "bad", "odd"]}, "tags": {"type": "array", "items":
      {"type": "string", "maxLength": 8}, "maxItems": 3}},
      "required": ["fortune", "lucky", "mood"], "additionalProperties": false})");
  int complete = 0;
  for (int seed = 1; seed <= 3; ++seed) {
    const auto reply = gateway_->post(
        "/v1/chat/completions",
        {{"model", "fortunes"},
         {"messages", {{{"role", "user"}, {"content", "Tell my fortune."}}}},
         {"max_tokens", 200},
         {"temperature", 1.0},
         {"seed", seed},
         {"response_format",
          {{"type", "json_schema"},
           {"json_schema", {{"name", "fortune"}, {"strict", true}, {"schema", schema}}}}}});
    ASSERT_EQ(reply.status, 200) << reply.body;
    const json choice = reply.parsed()["choices"][0];
    const std::string content = choice["message"]["content"].get<std::string>();
    if (choice["finish_reason"] == "stop") {
      ++complete;
      EXPECT_TRUE(validates(schema, content)) << content;
    } else {
      EXPECT_EQ(choice["finish_reason"], "length") << reply.body;
    }
  }
  EXPECT_GT(complete, 0);
}

TEST_F(StructuredHttp, JsonObjectStreamsAnObject) {
  for (int seed = 1; seed <= 2; ++seed) {
    const auto reply =
        gateway_->post("/v1/completions", {{"model", "fortunes"},
                                           {"prompt", "A computer"},
                                           {"max_tokens", 200},
                                           {"seed", seed},
                                           {"stream", true},
                                           {"response_format", {{"type", "json_object"}}}});
    ASSERT_EQ(reply.status, 200) << reply.body;
    std::string text, finish;
    for (const json& e : sse_events(reply.body)) {
      if (e == "[DONE]") continue;
      text += e["choices"][0]["text"].get<std::string>();
      if (e["choices"][0]["finish_reason"].is_string())
        finish = e["choices"][0]["finish_reason"].get<std::string>();
    }
    if (finish == "stop") {
      EXPECT_TRUE(json::parse(text).is_object()) << text;
    }
  }
}

TEST_F(StructuredHttp, GuidedRegexOnCompletions) {
  const auto reply = gateway_->post("/v1/completions", {{"model", "fortunes"},
                                                        {"prompt", "Never"},
                                                        {"max_tokens", 60},
                                                        {"seed", 3},
                                                        {"guided_regex", "(yes|no), [a-z]{2,9}!"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json choice = reply.parsed()["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "stop") << reply.body;
  EXPECT_TRUE(
      std::regex_match(choice["text"].get<std::string>(), std::regex("(yes|no), [a-z]{2,9}!")))
      << choice["text"];
}

TEST_F(StructuredHttp, AnUnsupportedKeywordIsA400NamingIt) {
  const auto reply = gateway_->post(
      "/v1/chat/completions",
      {{"model", "fortunes"},
       {"messages", {{{"role", "user"}, {"content", "x"}}}},
       {"response_format",
        {{"type", "json_schema"},
         {"json_schema",
          {{"name", "n"}, {"schema", {{"type", "string"}, {"pattern", "^a+$"}}}}}}}});
  EXPECT_EQ(reply.status, 400) << reply.body;
  EXPECT_NE(reply.body.find("'pattern'"), std::string::npos) << reply.body;
}

// The official openai npm client (tests/gateway/node, installed by tools/run-tests.sh): its
// json_schema answers, printed by the script, validated here.
TEST_F(StructuredHttp, TheOpenaiNpmClientsJsonSchemaAnswersValidate) {
  const std::filesystem::path dir = source_dir() / "tests/gateway/node";
  if (!std::filesystem::exists(dir / "node_modules/openai"))
    GTEST_SKIP() << "the openai npm client is not installed (cd " << dir.string() << " && npm ci)";
  const json schema = json::parse(R"({"type": "object", "properties": {
      "fortune": {"type": "string", "maxLength": 30}, "lucky": {"type": "integer",
      "minimum": 1, "maximum": 99}, "ok": {"type": "boolean"}},
      "required": ["fortune", "lucky"], "additionalProperties": false})");
  TempDir tmp;
  ChildProcess node = ChildProcess::spawn(
      ChildProcess::Options(
          {"node", "--test", (dir / "structured_output_client_test.mjs").string()})
          .with_env(
              {"HEARTH_GATEWAY_URL=http://127.0.0.1:" + std::to_string(gateway_->port()) + "/v1",
               "SCHEMA=" + schema.dump()})
          .stdout_to(ChildProcess::Stream::pipe())
          .stderr_to(ChildProcess::Stream::file(tmp.path() / "node.err")));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  const std::string out = node.stdout_pipe().read_to_end(deadline);
  const auto status = node.wait_until(deadline);
  ASSERT_TRUE(status) << "node did not finish";
  std::ifstream err_in(tmp.path() / "node.err");
  const std::string err(std::istreambuf_iterator<char>(err_in), {});
  EXPECT_TRUE(status->success()) << out << err;
  EXPECT_NE(out.find("# fail 0"), std::string::npos) << out;
  int answers = 0;
  for (size_t at = out.find("ANSWER "); at != std::string::npos; at = out.find("ANSWER ", at + 1)) {
    const std::string answer = out.substr(at + 7, out.find('\n', at) - at - 7);
    EXPECT_TRUE(validates(schema, answer)) << answer;
    ++answers;
  }
  EXPECT_GT(answers, 0) << out;
}

}  // namespace
}  // namespace hearth::test
