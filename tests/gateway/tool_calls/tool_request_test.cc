// A chat request's tools, tool_choice, parallel_tool_calls and the tool turns of its messages:
// what is accepted, what reaches the template, and each refusal a 400 naming the field.
#include "gateway/tool_calls/tool_request.h"

#include <gtest/gtest.h>

#include "gateway/chat_template.h"
#include "gateway/openai_request.h"
#include "tests/gateway/api_error_of.h"
#include "tests/gateway/golden_files.h"

namespace hearth::gateway {
namespace {

using ordered_json = nlohmann::ordered_json;

const char* kTool =
    R"({"type": "function", "function": {"name": "get_weather", "description": "d",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";

CompletionRequest chat(const std::string& fields) {
  return parse_completion_request(
      parse_request_body(R"({"model": "m", "messages": [{"role": "user", "content": "x"}])" +
                         fields + "}"),
      Endpoint::ChatCompletions, {});
}

ApiError chat_error(const std::string& fields) {
  return error_of([&] { chat(fields); });
}

TEST(ToolRequest, ToolsReachTheTemplateAndAreParsedUnderAuto) {
  const CompletionRequest r = chat(std::string(R"(, "tools": [)") + kTool + "]");
  EXPECT_TRUE(r.tools.parse);
  EXPECT_TRUE(r.tools.parallel);
  ASSERT_TRUE(r.template_extra.contains("tools"));
  EXPECT_EQ(r.template_extra["tools"][0]["function"]["name"], "get_weather");

  const CompletionRequest none =
      chat(std::string(R"(, "tool_choice": "none", "parallel_tool_calls": false, "tools": [)") +
           kTool + "]");
  EXPECT_FALSE(none.tools.parse);  // rendered for the model, never parsed from its output
  EXPECT_FALSE(none.tools.parallel);
  EXPECT_TRUE(none.template_extra.contains("tools"));

  const CompletionRequest without = chat(R"(, "tool_choice": "auto")");
  EXPECT_FALSE(without.tools.parse);
  EXPECT_FALSE(without.template_extra.contains("tools"));
}

TEST(ToolRequest, ForcedToolChoiceIsParsedAndNamesAFunctionOfTheTools) {
  const std::string tools = std::string(R"(, "tools": [)") + kTool + "]";
  const CompletionRequest required = chat(tools + R"(, "tool_choice": "required")");
  EXPECT_TRUE(required.tools.forced);
  EXPECT_TRUE(required.tools.parse);
  EXPECT_TRUE(required.tools.forced_name.empty());
  const CompletionRequest named =
      chat(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  EXPECT_TRUE(named.tools.forced);
  EXPECT_EQ(named.tools.forced_name, "get_weather");
  const ApiError unknown =
      chat_error(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "other"}})");
  EXPECT_EQ(unknown.status(), 400);
  EXPECT_EQ(unknown.param(), "tool_choice.function.name");
  EXPECT_EQ(chat_error(R"(, "tool_choice": "required")").param(), "tool_choice");
}

TEST(ToolRequest, EveryOtherMistakeIsA400NamingTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {R"(, "tools": {})", "tools"},
      {R"(, "tools": [])", "tools"},
      {R"(, "tools": [{"type": "web_search"}])", "tools[0].type"},
      {R"(, "tools": [{"type": "function"}])", "tools[0].function"},
      {R"(, "tools": [{"type": "function", "function": {"name": "a b"}}])",
       "tools[0].function.name"},
      {R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": 1}}])",
       "tools[0].function.parameters"},
      {R"(, "tools": [{"type": "function", "function": {"name": "f", "strict": true}}])",
       "tools[0].function.strict"},
      {R"(, "tools": [{"type": "function", "function": {"name": "f"}, "extra": 1}])",
       "tools[0].extra"},
      {R"(, "tool_choice": "sometimes")", "tool_choice"},
      {R"(, "tool_choice": 5)", "tool_choice"},
      {R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls"},
  };
  for (const auto& [fields, param] : cases) {
    const ApiError e = chat_error(fields);
    EXPECT_EQ(e.status(), 400) << fields << ": " << e.what();
    EXPECT_EQ(e.param(), param) << fields << ": " << e.what();
  }
}

TEST(ToolRequest, HistoryWithToolCallsAndToolResultsIsKeptForTheTemplate) {
  const ordered_json body = parse_request_body(R"({"model": "m", "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "call_2", "type": "function",
         "function": {"name": "get_weather", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "22"}]})");
  const CompletionRequest r = parse_completion_request(body, Endpoint::ChatCompletions, {});
  const ordered_json& m = r.prompts[0].messages;
  EXPECT_TRUE(m[1]["content"].is_null());
  // A JSON string of arguments becomes the object the templates print with tojson.
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], ordered_json({{"city", "Paris"}}));
  EXPECT_EQ(m[1]["tool_calls"][1]["function"]["arguments"], "not json");
  EXPECT_EQ(m[2]["tool_call_id"], "call_1");

  const ApiError bad = error_of([] {
    parse_completion_request(parse_request_body(R"({"model": "m", "messages": [{"role": "assistant",
            "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]})"),
                             Endpoint::ChatCompletions, {});
  });
  EXPECT_EQ(bad.param(), "messages[0].tool_calls[0].function.name") << bad.what();
  const ApiError id = error_of([] {
    parse_completion_request(
        parse_request_body(
            R"({"model": "m", "messages": [{"role": "tool", "tool_call_id": 7, "content": "x"}]})"),
        Endpoint::ChatCompletions, {});
  });
  EXPECT_EQ(id.param(), "messages[0].tool_call_id") << id.what();
}

// OpenAI's clients send a call's arguments as a JSON string. Read through the request, they
// must render in each real template exactly as jinja2 rendered the same conversation with the
// arguments as objects (tests/gateway/golden).
TEST(ToolRequest, StringArgumentsRenderAsJinja2RenderedTheObjects) {
  const auto conversations = testing::read_json(testing::golden_dir() + "/conversations.json");
  int compared = 0;
  for (const char* name : {"qwen2.5", "qwen3", "mistral-nemo", "llama3.1-tool-use", "llama3.2"}) {
    const auto tmpl = testing::read_json(testing::golden_dir() + "/templates/" + name + ".json");
    const auto expected = testing::read_json(testing::golden_dir() + "/expected/" + name + ".json");
    const ChatTemplate chat = ChatTemplate::load(tmpl["chat_template"].get<std::string>());
    for (size_t i = 0; i < conversations.size(); ++i) {
      const ordered_json& conv = conversations[i];
      const std::string case_name = conv["name"].get<std::string>();
      if (case_name != "tool_call_round_trip" && case_name != "parallel_tool_calls" &&
          case_name != "tool_call_null_content")
        continue;
      const ordered_json& want = expected["results"][i];
      if (!want.contains("output")) continue;
      SCOPED_TRACE(std::string(name) + " / " + case_name);
      ordered_json body = {{"model", "m"}, {"messages", conv["messages"]}};
      for (ordered_json& m : body["messages"])
        if (m.contains("tool_calls"))
          for (ordered_json& call : m["tool_calls"])
            call["function"]["arguments"] = call["function"]["arguments"].dump();
      const CompletionRequest r =
          parse_completion_request(body, Endpoint::ChatCompletions, GenerationDefaults{});
      ChatTemplateInput input;
      input.messages = r.prompts[0].messages;
      input.add_generation_prompt = conv["add_generation_prompt"].get<bool>();
      if (tmpl["bos_token"].is_string()) input.bos_token = tmpl["bos_token"].get<std::string>();
      if (tmpl["eos_token"].is_string()) input.eos_token = tmpl["eos_token"].get<std::string>();
      input.extra = conv["extra"];
      input.now = testing::parse_now(expected["now"].get<std::string>());
      EXPECT_EQ(chat.render(input), want["output"].get<std::string>());
      ++compared;
    }
  }
  EXPECT_GE(compared, 10);
}

}  // namespace
}  // namespace hearth::gateway
