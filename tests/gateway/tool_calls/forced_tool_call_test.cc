// tool_choice "required" and a named function: the grammar built for each tool-call family
// accepts a valid call in that family's format (and the tool-call parser reads it back as
// that call) and rejects calls to other functions, arguments outside the schema, other
// families' formats and plain text; unsupported parameters keywords are a 400 naming them.
#include "gateway/tool_calls/forced_tool_call.h"

#include <gtest/gtest.h>

#include "gateway/openai_request.h"
#include "gateway/tool_calls/tool_call_parser.h"
#include "tests/gateway/api_error_of.h"
#include "worker/engine/structured/grammar.h"

namespace hearth::gateway {
namespace {

const char* kTools = R"(, "tools": [
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
   "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"],
   "additionalProperties": false}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
   "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
   "required": ["a", "b"], "additionalProperties": false}}}])";

ToolSettings tools(const std::string& choice) {
  return parse_completion_request(
             parse_request_body(R"({"model": "m", "messages": [{"role": "user", "content": "x"}])" +
                                std::string(kTools) + R"(, "tool_choice": )" + choice + "}"),
             Endpoint::ChatCompletions, {})
      .tools;
}

structured::ByteDfa grammar(const ToolSettings& t, ToolFormat f) {
  return structured::ByteDfa::compile(
      structured::structured_language(forced_tool_call_output(t, f, {})), 50000);
}

// The calls the parser reads from `text` when it is a forced call's output.
std::vector<ParsedToolCall> parsed(ToolFormat f, const std::string& text) {
  const std::string fed =
      forced_call_primes_parser(f) ? std::string(tool_call_start(f)) + text : text;
  return parse_tool_calls(f, fed).calls;
}

TEST(ForcedToolCall, EachFamilyAcceptsItsCallAndTheParserReadsIt) {
  const ToolSettings required = tools(R"("required")");
  ASSERT_TRUE(required.forced);
  ASSERT_TRUE(required.parse);
  const struct {
    ToolFormat format;
    std::string call;
  } cases[] = {
      {ToolFormat::Hermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>"},
      {ToolFormat::Llama3Json, R"({"name": "add", "parameters": {"a": 1, "b": -2}})"},
      {ToolFormat::Mistral, R"([{"name":"get_weather","arguments":{"city":"Oslo"}}])"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(tool_format_name(c.format));
    EXPECT_TRUE(grammar(required, c.format).matches(c.call)) << c.call;
    const std::vector<ParsedToolCall> calls = parsed(c.format, c.call);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_TRUE(calls[0].name == "get_weather" || calls[0].name == "add") << calls[0].name;
  }
}

TEST(ForcedToolCall, TheGrammarRejectsOtherCallsAndOtherFormats) {
  const ToolSettings named = tools(R"({"type": "function", "function": {"name": "add"}})");
  ASSERT_TRUE(named.forced);
  EXPECT_EQ(named.forced_name, "add");
  const structured::ByteDfa hermes = grammar(named, ToolFormat::Hermes);
  EXPECT_TRUE(hermes.matches(
      "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}\n</tool_call>"));
  for (const std::string bad : {
           // another function than the named one
           "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\"}}\n</tool_call>",
           // arguments outside the schema: a missing required one, a string for an integer
           "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1}}\n</tool_call>",
           "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":\"1\",\"b\":2}}\n</tool_call>",
           // Llama's key, no wrapper, plain text
           "<tool_call>\n{\"name\":\"add\",\"parameters\":{\"a\":1,\"b\":2}}\n</tool_call>",
           "{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}",
           "I will not call a tool.",
       })
    EXPECT_FALSE(hermes.matches(bad)) << bad;

  const structured::ByteDfa llama = grammar(named, ToolFormat::Llama3Json);
  EXPECT_TRUE(llama.matches(R"({"name":"add","parameters":{"a":1,"b":2}})"));
  EXPECT_FALSE(llama.matches(R"({"name":"add","arguments":{"a":1,"b":2}})"));
  EXPECT_FALSE(llama.matches(R"(<|python_tag|>{"name":"add","parameters":{"a":1,"b":2}})"));

  const structured::ByteDfa mistral = grammar(named, ToolFormat::Mistral);
  EXPECT_TRUE(mistral.matches(R"([{"name":"add","arguments":{"a":1,"b":2}}])"));
  EXPECT_FALSE(mistral.matches(R"([])"));
  EXPECT_FALSE(mistral.matches(R"({"name":"add","arguments":{"a":1,"b":2}})"));
}

TEST(ForcedToolCall, RefusalsNameTheField) {
  const ApiError unknown =
      error_of([] { tools(R"({"type": "function", "function": {"name": "nope"}})"); });
  EXPECT_EQ(unknown.status(), 400);
  EXPECT_EQ(unknown.param(), "tool_choice.function.name") << unknown.what();

  ToolSettings t = tools(R"("required")");
  t.tools[1]["function"]["parameters"]["properties"]["a"]["pattern"] = "[0-9]+";
  const ApiError keyword = error_of([&] { forced_tool_call_output(t, ToolFormat::Hermes, {}); });
  EXPECT_EQ(keyword.status(), 400);
  EXPECT_EQ(keyword.param(), "tools[1].function.parameters") << keyword.what();
  EXPECT_NE(std::string(keyword.what()).find("'pattern'"), std::string::npos) << keyword.what();

  const ApiError both = error_of([&] {
    forced_tool_call_output(tools(R"("required")"), ToolFormat::Hermes,
                            {OutputFormat::JsonObject, ""});
  });
  EXPECT_EQ(both.param(), "tool_choice") << both.what();
}

}  // namespace
}  // namespace hearth::gateway
