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
#include "tests/gateway/shared_gateway.h"
#include "tests/gateway/node_client.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {
namespace {

class StructuredHttp : public SharedGatewayTest {};

bool validates(const json& schema, const std::string& instance) {
  return json_schema_validates(schema.dump(), instance);
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
  if (!openai_npm_installed()) GTEST_SKIP() << openai_npm_missing();
  const json schema = json::parse(R"({"type": "object", "properties": {
      "fortune": {"type": "string", "maxLength": 30}, "lucky": {"type": "integer",
      "minimum": 1, "maximum": 99}, "ok": {"type": "boolean"}},
      "required": ["fortune", "lucky"], "additionalProperties": false})");
  const NodeTestRun run = run_node_test(
      "structured_output_client_test.mjs",
      {"HEARTH_GATEWAY_URL=http://127.0.0.1:" + std::to_string(gateway_->port()) + "/v1",
       "SCHEMA=" + schema.dump()});
  ASSERT_TRUE(run.finished) << "node did not finish";
  EXPECT_TRUE(run.success) << run.out << run.err;
  EXPECT_TRUE(run.none_failed()) << run.out;
  const std::string& out = run.out;
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
