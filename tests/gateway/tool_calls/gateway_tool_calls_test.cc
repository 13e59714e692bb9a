// Tool calling through a real hearth-gateway over HTTP, on the default model. That model never
// writes a call by itself, so what its output would be parsed into is the parser tests' part;
// here: the tools reach the template, the format comes from the template (a template that
// shows none refuses tools under "auto"), forced tool_choice is refused by value, history with
// tool calls and results renders, and with the parser on, plain output comes back unchanged,
// streamed or whole.
#include <gtest/gtest.h>

#include "tests/gateway/gateway_process.h"

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

TEST(GatewayToolCalls, ForcedToolChoiceIsRefusedByValue) {
  GatewayProcess gw(hermes_template());
  for (const json& choice :
       {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
    const auto r =
        gw.post("/v1/chat/completions", chat({{"tools", kTools}, {"tool_choice", choice}}));
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.parsed()["error"]["param"], "tool_choice") << r.body;
    EXPECT_NE(r.body.find("structured-output mask"), std::string::npos) << r.body;
  }
  const auto web =
      gw.post("/v1/chat/completions", chat({{"tools", json::array({{{"type", "web_search"}}})}}));
  EXPECT_EQ(web.status, 400) << web.body;
  EXPECT_EQ(web.parsed()["error"]["param"], "tools[0].type") << web.body;
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
}  // namespace hearth::test
