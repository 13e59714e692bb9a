// Streamed tool calls in OpenAI's chunk shape: the first delta of a call carries index, id,
// type and the function's name with empty arguments, the next its arguments; put together
// as a client does, they equal the whole response's message.tool_calls.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/gateway/node_client.h"
#include "tests/gateway/tool_calls/tool_call_stream.h"
#include "tests/support/paths.h"
#include "tests/support/temp_dir.h"

namespace hearth::gateway {
namespace {

using json = nlohmann::json;

// What OpenAI's clients do with deltas: content appended, each call's fields by index.
json accumulate(const std::vector<json>& chunks, std::string& content) {
  json calls = json::array();
  for (const json& chunk : chunks) {
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string())
      content += delta["content"].get<std::string>();
    if (!delta.contains("tool_calls")) continue;
    for (const json& d : delta["tool_calls"]) {
      const size_t index = d.at("index").get<size_t>();
      if (index == calls.size()) {
        EXPECT_TRUE(d.contains("id") && d.contains("type")) << d.dump();
        EXPECT_EQ(d["function"]["arguments"], "") << "the name comes first: " << d.dump();
        calls.push_back({{"id", d["id"]},
                         {"type", d["type"]},
                         {"function", {{"name", d["function"]["name"]}, {"arguments", ""}}}});
        continue;
      }
      EXPECT_LT(index, calls.size()) << d.dump();
      if (index >= calls.size()) return calls;
      EXPECT_FALSE(d.contains("id")) << d.dump();
      calls[index]["function"]["arguments"] =
          calls[index]["function"]["arguments"].get<std::string>() +
          d["function"]["arguments"].get<std::string>();
    }
  }
  return calls;
}

TEST(ToolCallChunks, StreamedCallsEqualTheWholeResponseInEveryFamily) {
  const std::pair<ToolFormat, std::string> outputs[] = {
      {ToolFormat::Hermes,
       "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": "
       "{\"q\": \"x\"}}\n</tool_call>"},
      {ToolFormat::Llama3Json,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
      {ToolFormat::Mistral,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"},
  };
  for (const auto& [format, output] : outputs) {
    const auto s = testing::tool_call_stream(format, output);
    ASSERT_FALSE(s.chunks.empty());
    EXPECT_EQ(s.chunks.front()["choices"][0]["delta"]["role"], "assistant") << output;
    EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "tool_calls") << output;
    std::string content;
    const json calls = accumulate(s.chunks, content);
    const json& message = s.response["choices"][0]["message"];
    EXPECT_EQ(calls, message["tool_calls"]) << output;
    EXPECT_EQ(s.response["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city":"Paris"})");
    if (format == ToolFormat::Hermes) {
      EXPECT_EQ(content, "Checking.");
      EXPECT_EQ(message["content"], "Checking.");
      EXPECT_EQ(calls.size(), 2u);
      EXPECT_NE(calls[0]["id"], calls[1]["id"]);
    } else {
      EXPECT_EQ(content, "") << output;
      EXPECT_TRUE(message["content"].is_null()) << s.response.dump();
    }
    if (format == ToolFormat::Mistral) {
      EXPECT_EQ(calls[0]["id"].get<std::string>().size(), 9u);
    }
  }
}

TEST(ToolCallChunks, OutputThatIsNoCallStreamsAsContent) {
  const std::string output = "<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>";
  const auto s = testing::tool_call_stream(ToolFormat::Hermes, output);
  std::string content;
  EXPECT_TRUE(accumulate(s.chunks, content).empty());
  EXPECT_EQ(content, output);
  EXPECT_EQ(s.response["choices"][0]["message"]["content"], output);
  EXPECT_FALSE(s.response["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "stop");
}

}  // namespace
}  // namespace hearth::gateway

namespace hearth::test {
namespace {

using json = nlohmann::json;

// The official openai npm client (tests/gateway/node, installed by tools/run-tests.sh) reads
// the streams above: tool_calls_stream_test.mjs serves them and checks what the client builds.
TEST(OpenAIClient, PutsStreamedToolCallsTogether) {
  if (!openai_npm_installed()) GTEST_SKIP() << openai_npm_missing();
  json fixtures = json::object();
  const std::pair<const char*, std::pair<gateway::ToolFormat, std::string>> outputs[] = {
      {"hermes",
       {gateway::ToolFormat::Hermes,
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Lyon\"}}\n</tool_call>"}},
      {"llama3_json",
       {gateway::ToolFormat::Llama3Json,
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"}},
      {"mistral",
       {gateway::ToolFormat::Mistral,
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"}},
  };
  for (const auto& [name, output] : outputs) {
    const auto s = gateway::testing::tool_call_stream(output.first, output.second);
    std::string sse;
    for (const json& chunk : s.chunks) sse += gateway::sse_event(chunk);
    sse += gateway::kSseDone;
    fixtures[name] = {{"sse", sse}, {"response", s.response}};
  }
  const std::string fixture_file =
      (test::process_scratch_dir() / "tool-call-fixtures.json").string();
  std::ofstream(fixture_file) << fixtures.dump();
  const NodeTestRun run =
      run_node_test("tool_calls_stream_test.mjs", {"HEARTH_TOOL_CALL_FIXTURES=" + fixture_file},
                    std::chrono::seconds(120));
  ASSERT_TRUE(run.finished) << "node did not finish";
  EXPECT_TRUE(run.success) << run.out << run.err;
  EXPECT_TRUE(run.none_failed()) << run.out;
  const std::string& out = run.out;
  EXPECT_NE(out.find("# pass 7"), std::string::npos) << out;
}

}  // namespace
}  // namespace hearth::test
