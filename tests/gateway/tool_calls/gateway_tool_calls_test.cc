// Tool calling through a real hearth-gateway over HTTP, on the default model. That model never
// writes a call by itself, so what its output would be parsed into is the parser tests' part;
// here: the tools reach the template, the format comes from the template (a template that
// shows none refuses tools under "auto"), forced tool_choice gives a call valid under the
// tool's schema, history with
// tool calls and results renders, and with the parser on, plain output comes back unchanged,
// streamed or whole.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/gateway/gateway_process.h"
#include "tests/gateway/node_client.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {
namespace {

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");

json chat(json extra = json::object()) {
  json body = {{"model", "fortunes"},
               {"messages", json::array({{{"role", "user"}, {"content", "A computer"}}})},
               {"max_tokens", 24},
               {"temperature", 0}};
  body.update(extra);
  return body;
}

// Two tools whose parameters leave nothing open (required keys, no others, bounded values):
// a forced call can be checked against them.
const json kStrictTools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
     "additionalProperties": false}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
     "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                    "b": {"type": "integer", "minimum": 0, "maximum": 99}},
     "required": ["a", "b"], "additionalProperties": false}}}])");

// The parameters of kStrictTools' function `name`; nullptr when none is called that.
const json* strict_tool_parameters(const std::string& name) {
  for (const json& t : kStrictTools)
    if (t["function"]["name"] == name) return &t["function"]["parameters"];
  return nullptr;
}

std::vector<std::string> hermes_template() {
  return {"--chat-template",
          (source_dir() / "tests/gateway/tool_calls/hermes-test.jinja").string()};
}

TEST(GatewayToolCalls, ATemplateWithoutAToolFormatRefusesToolsUnderAuto) {
  GatewayProcess gw;  // plain.jinja: no tool-call markup
  const auto refused = gw.post("/v1/chat/completions", chat({{"tools", kTools}}));
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.parsed()["error"]["param"], "tools") << refused.body;
  // tool_choice "none": the tools go to the template, nothing is parsed.
  const auto none =
      gw.post("/v1/chat/completions", chat({{"tools", kTools}, {"tool_choice", "none"}}));
  EXPECT_EQ(none.status, 200) << none.body;
}

bool validates(const json& schema, const std::string& instance) {
  return json_schema_validates(schema.dump(), instance);
}

// The model never writes a call by itself: "required" and a named function make it write one
// (the structured-output mask), to a function of the tools, with arguments in its schema.
TEST(GatewayToolCalls, ForcedToolChoiceGivesAValidCall) {
  GatewayProcess gw(hermes_template());
  for (const json& choice :
       {json("required"), json{{"type", "function"}, {"function", {{"name", "add"}}}}}) {
    SCOPED_TRACE(choice.dump());
    const auto r =
        gw.post("/v1/chat/completions",
                chat({{"tools", kStrictTools}, {"tool_choice", choice}, {"max_tokens", 200}}));
    ASSERT_EQ(r.status, 200) << r.body;
    const json c = r.parsed()["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls") << r.body;
    ASSERT_TRUE(c["message"].contains("tool_calls")) << r.body;
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.body;
    const json call = c["message"]["tool_calls"][0];
    const std::string name = call["function"]["name"];
    if (choice.is_object()) {
      EXPECT_EQ(name, "add");
    }
    const json* schema = strict_tool_parameters(name);
    ASSERT_NE(schema, nullptr) << name;
    EXPECT_TRUE(validates(*schema, call["function"]["arguments"].get<std::string>())) << r.body;
  }
  // Streamed: the same call as delta.tool_calls (name, then arguments), no content, same
  // finish reason (temperature 0: the same tokens as the whole response).
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const json body = chat({{"tools", kStrictTools}, {"tool_choice", named}, {"max_tokens", 200}});
  const auto whole = gw.post("/v1/chat/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.body;
  json streamed_body = body;
  streamed_body["stream"] = true;
  const auto streamed = gw.post("/v1/chat/completions", streamed_body);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  std::string name, arguments, finish;
  for (const json& e : sse_events(streamed.body)) {
    if (!e.is_object() || e["choices"].empty()) continue;
    const json& delta = e["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("content") && delta["content"].is_string() &&
                 !delta["content"].get<std::string>().empty())
        << e.dump();
    if (delta.contains("tool_calls")) {
      const json& f = delta["tool_calls"][0]["function"];
      if (f.contains("name")) name += f["name"].get<std::string>();
      if (f.contains("arguments")) arguments += f["arguments"].get<std::string>();
    }
    if (e["choices"][0]["finish_reason"].is_string()) finish = e["choices"][0]["finish_reason"];
  }
  const json call = whole.parsed()["choices"][0]["message"]["tool_calls"][0]["function"];
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, call["arguments"].get<std::string>());
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_TRUE(validates(kStrictTools[0]["function"]["parameters"], arguments)) << arguments;

  // Parameters outside the compiler's subset: a 400 naming the keyword under tools.
  json bad = kStrictTools;
  bad[0]["function"]["parameters"]["properties"]["city"]["pattern"] = "[A-Z].*";
  const auto refused =
      gw.post("/v1/chat/completions", chat({{"tools", bad}, {"tool_choice", "required"}}));
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.parsed()["error"]["param"], "tools[0].function.parameters") << refused.body;
  EXPECT_NE(refused.body.find("pattern"), std::string::npos) << refused.body;
}

TEST(GatewayToolCalls, ToolsAndToolHistoryRenderAndPlainOutputIsUnchanged) {
  GatewayProcess gw(hermes_template());
  const auto without = gw.post("/v1/chat/completions", chat());
  ASSERT_EQ(without.status, 200) << without.body;
  const auto with = gw.post("/v1/chat/completions", chat({{"tools", kTools}}));
  ASSERT_EQ(with.status, 200) << with.body;
  // The tools are in the prompt: the template rendered them.
  const json whole = with.parsed();
  EXPECT_GT(whole["usage"]["prompt_tokens"].get<int>(),
            without.parsed()["usage"]["prompt_tokens"].get<int>());
  const json message = whole["choices"][0]["message"];
  EXPECT_FALSE(message.contains("tool_calls")) << with.body;  // the tiny model writes none
  EXPECT_NE(whole["choices"][0]["finish_reason"], "tool_calls");

  // Streamed with the parser on: the same text, as content deltas, and no tool_calls deltas.
  const auto streamed =
      gw.post("/v1/chat/completions", chat({{"tools", kTools}, {"stream", true}}));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  std::string text;
  for (const json& e : sse_events(streamed.body)) {
    if (!e.is_object()) continue;
    const json& delta = e["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("tool_calls")) << e.dump();
    if (delta.contains("content") && delta["content"].is_string())
      text += delta["content"].get<std::string>();
  }
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text, message["content"].get<std::string>());

  // A conversation with a call and its result renders (arguments as OpenAI's JSON string).
  json history = chat({{"tools", kTools}});
  history["messages"] = json::parse(R"([
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "22 degrees"}])");
  const auto round = gw.post("/v1/chat/completions", history);
  EXPECT_EQ(round.status, 200) << round.body;
  const auto tokenized =
      gw.post("/tokenize", {{"model", "fortunes"}, {"messages", history["messages"]}});
  EXPECT_EQ(tokenized.status, 200) << tokenized.body;
}

}  // namespace
// The official openai npm client (tests/gateway/node, installed by tools/run-tests.sh) reads a
// forced call streamed from the real gateway: its stream helper rebuilds the whole response's
// call, and every call's arguments validate against the tool's parameters.
TEST(GatewayToolCalls, TheOpenaiNpmClientReadsStreamedCallsFromTheGateway) {
  if (!openai_npm_installed()) GTEST_SKIP() << openai_npm_missing();
  GatewayProcess gw(hermes_template());
  const NodeTestRun run =
      run_node_test("tool_calls_gateway_test.mjs",
                    {"HEARTH_GATEWAY_URL=http://127.0.0.1:" + std::to_string(gw.port()) + "/v1",
                     "TOOLS=" + kStrictTools.dump()});
  ASSERT_TRUE(run.finished) << "node did not finish";
  EXPECT_TRUE(run.success) << run.out << run.err;
  EXPECT_TRUE(run.none_failed()) << run.out;
  const std::string& out = run.out;
  int calls = 0;
  for (size_t at = out.find("ARGS "); at != std::string::npos; at = out.find("ARGS ", at + 1)) {
    const std::string line = out.substr(at + 5, out.find('\n', at) - at - 5);
    const std::string name = line.substr(0, line.find(' '));
    const std::string arguments = line.substr(line.find(' ') + 1);
    const json* schema = strict_tool_parameters(name);
    ASSERT_NE(schema, nullptr) << line;
    EXPECT_TRUE(validates(*schema, arguments)) << line;
    ++calls;
  }
  EXPECT_EQ(calls, 2) << out;
}

}  // namespace hearth::test
