// Tool-call parsing per family, whole and streamed: every text is also fed split at every byte
// boundary and one byte at a time, and must give the same content and calls, with nothing of
// a valid call's markup ever released as content.
#include "gateway/tool_calls/tool_call_parser.h"

#include <gtest/gtest.h>

#include <cctype>

#include "tests/gateway/golden_files.h"
#include "tests/support/fuzz_rng.h"

namespace hearth::gateway {
namespace {

struct Streamed {
  std::string content;
  std::vector<ParsedToolCall> calls;
  std::vector<std::string> content_pieces;
};

void take(std::vector<ToolCallPiece> pieces, Streamed& s) {
  for (ToolCallPiece& p : pieces) {
    if (p.call) {
      s.calls.push_back(std::move(*p.call));
    } else {
      s.content += p.content;
      s.content_pieces.push_back(p.content);
    }
  }
}

Streamed feed_split(ToolFormat f, std::string_view text, const std::vector<size_t>& cuts,
                    size_t max_calls = 0) {
  ToolCallParser parser(f, max_calls);
  Streamed s;
  size_t from = 0;
  for (size_t cut : cuts) {
    take(parser.feed(text.substr(from, cut - from)), s);
    from = cut;
  }
  take(parser.feed(text.substr(from)), s);
  take(parser.finish(), s);
  return s;
}

std::string describe(const std::vector<ParsedToolCall>& calls) {
  std::string out;
  for (const auto& c : calls) out += c.name + "(" + c.arguments + ") ";
  return out;
}

// The whole parse, then the same text split at each boundary and byte by byte: the same
// result, and no content piece carries `forbidden` (markup of a call that is valid).
void expect_parse(ToolFormat f, std::string_view text, const std::optional<std::string>& content,
                  const std::vector<ParsedToolCall>& calls, std::string_view forbidden = {},
                  size_t max_calls = 0) {
  const ParsedOutput whole = parse_tool_calls(f, text, max_calls);
  EXPECT_EQ(whole.content, content) << text;
  EXPECT_EQ(describe(whole.calls), describe(calls)) << text;
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  std::vector<std::vector<size_t>> splits = {every};
  for (size_t i = 0; i <= text.size(); ++i) splits.push_back({i});
  for (const auto& cuts : splits) {
    const Streamed s = feed_split(f, text, cuts, max_calls);
    EXPECT_EQ(s.content, content.value_or("")) << text << " cut at " << cuts.size();
    EXPECT_EQ(describe(s.calls), describe(calls)) << text;
    if (forbidden.empty()) continue;
    for (const std::string& piece : s.content_pieces) {
      EXPECT_EQ(piece.find(forbidden), std::string::npos) << piece;
    }
  }
}

TEST(ToolFormat, IsReadFromTheChatTemplate) {
  const std::pair<const char*, ToolFormat> cases[] = {
      {"llama2-chat", ToolFormat::None},    {"llama3", ToolFormat::None},
      {"llama3.1-npm", ToolFormat::None},   {"llama3.1-tool-use", ToolFormat::Llama3Json},
      {"llama3.2", ToolFormat::Llama3Json}, {"mistral-nemo", ToolFormat::Mistral},
      {"qwen2.5", ToolFormat::Hermes},      {"qwen3", ToolFormat::Hermes},
  };
  for (const auto& [name, format] : cases) {
    const auto t = testing::read_json(testing::golden_dir() + "/templates/" + name + ".json");
    EXPECT_EQ(tool_format_of_template(t["chat_template"].get<std::string>()), format) << name;
  }
}

TEST(ToolFormat, CallIdsFitEachFamily) {
  const std::string mistral = make_tool_call_id(ToolFormat::Mistral, "chatcmpl-1-0-0");
  EXPECT_EQ(mistral.size(), 9u);
  for (char c : mistral) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << mistral;
  const std::string hermes = make_tool_call_id(ToolFormat::Hermes, "chatcmpl-1-0-0");
  EXPECT_EQ(hermes.rfind("call_", 0), 0u);
  EXPECT_EQ(hermes.size(), 29u);
  EXPECT_EQ(hermes, make_tool_call_id(ToolFormat::Hermes, "chatcmpl-1-0-0"));
  EXPECT_NE(hermes, make_tool_call_id(ToolFormat::Hermes, "chatcmpl-1-0-1"));
}

const ParsedToolCall kWeather{"get_weather", R"({"city":"Paris","unit":"celsius"})"};
const ParsedToolCall kSearch{"search", R"({"query":"a \"quoted\" } brace"})"};

TEST(HermesToolCalls, OneCallAfterText) {
  expect_parse(ToolFormat::Hermes,
               "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
               "{\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
               "Let me check.", {kWeather}, "<tool_call");
}

TEST(HermesToolCalls, ParallelCallsAndNoContent) {
  const std::string text =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
      "\"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": "
      "{\"query\": \"a \\\"quoted\\\" } brace\"}}\n</tool_call>\n";
  expect_parse(ToolFormat::Hermes, text, std::nullopt, {kWeather, kSearch}, "tool_call");
  // parallel_tool_calls: false keeps the first.
  expect_parse(ToolFormat::Hermes, text, std::nullopt, {kWeather}, "tool_call", 1);
}

TEST(HermesToolCalls, UnclosedCallAtTheEndCountsWhenItsJsonIsWhole) {
  expect_parse(ToolFormat::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}", std::nullopt,
               {{"f", "{}"}});
}

TEST(HermesToolCalls, InvalidJsonIsPlainContent) {
  for (const char* text : {
           "Sure <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> done",
           "<tool_call>not json</tool_call>",
           "<tool_call>{\"arguments\": {}}</tool_call>",  // no name
           "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"argu",  // cut off
           "  <tool_call> \n",
       })
    expect_parse(ToolFormat::Hermes, text, std::string(text), {});
}

TEST(HermesToolCalls, TextWithoutCallsIsUnchanged) {
  for (const char* text : {"", " ", "plain text\n\n", "a < b and <tool but not a call <tool_cal",
                           "ends with a space ", "\n\t x \n", "</tool_call> stray", "ünïcode <"})
    expect_parse(ToolFormat::Hermes, text, std::string(text), {});
}

TEST(HermesToolCalls, TextAfterACallIsContentToo) {
  expect_parse(ToolFormat::Hermes,
               "A <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call> \n B", "AB",
               {{"f", R"({"x":1})"}}, "tool_call");
}

TEST(LlamaToolCalls, BareJsonAtTheStart) {
  expect_parse(ToolFormat::Llama3Json,
               "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": "
               "\"celsius\"}}",
               std::nullopt, {kWeather}, "{");
  expect_parse(ToolFormat::Llama3Json,
               "\n {\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": "
               "\"Paris\", \"unit\": \"celsius\"}}; {\"name\": \"search\", \"parameters\": "
               "{\"query\": \"a \\\"quoted\\\" } brace\"}}",
               std::nullopt, {kWeather, kSearch}, "{");
}

TEST(LlamaToolCalls, AfterThePythonTag) {
  expect_parse(ToolFormat::Llama3Json,
               "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", "
               "\"unit\": \"celsius\"}}",
               std::nullopt, {kWeather}, "python_tag");
  expect_parse(ToolFormat::Llama3Json, "<|python_tag|>{\"name\": \"f\", \"arguments\": \"{}\"}",
               std::nullopt, {{"f", "{}"}}, "python_tag");
}

TEST(LlamaToolCalls, JsonLaterInTheTextOrInvalidIsContent) {
  for (const char* text : {
           "The answer is {\"name\": \"f\", \"parameters\": {}}",
           "{\"name\": \"f\", \"parameters\": {}",  // cut off
           "{\"a\": 1} and more",                   // JSON, but no call
           "{name: f}",
           "<|python_tag|>print(1)",  // code interpreter: not a function call
           "  \n",
       })
    expect_parse(ToolFormat::Llama3Json, text, std::string(text), {});
}

TEST(MistralToolCalls, ArrayOfCalls) {
  expect_parse(ToolFormat::Mistral,
               "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
               "\"unit\": \"celsius\"}, \"id\": \"abcDEF123\"}, {\"name\": \"search\", "
               "\"arguments\": {\"query\": \"a \\\"quoted\\\" } brace\"}}]",
               std::nullopt, {kWeather, kSearch}, "TOOL_CALLS");
  expect_parse(ToolFormat::Mistral, "Checking.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
               "Checking.", {{"f", "{}"}}, "TOOL_CALLS");
}

TEST(MistralToolCalls, InvalidIsContent) {
  for (const char* text : {
           "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"nom\": 1}]",
           "[TOOL_CALLS] nothing",
           "[TOOL_CALLS][{\"name\": \"f\"",
           "[TOOL_CALLS",
           "[1, 2]",
       })
    expect_parse(ToolFormat::Mistral, text, std::string(text), {});
}

TEST(NoToolFormat, EverythingIsContent) {
  const char* text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  expect_parse(ToolFormat::None, text, std::string(text), {});
}

}  // namespace
}  // namespace hearth::gateway

namespace hearth::gateway {
namespace {

// Outputs stitched from markup, JSON pieces, whitespace and text, fed in random pieces: the
// stream always gives what the whole parse gives, and an output with no valid call comes back
// byte for byte.
TEST(ToolCallParserFuzz, StreamedEqualsWholeAndNoCallMeansUnchanged) {
  const std::vector<std::string> fragments = {"<tool_call>",
                                              "</tool_call>",
                                              "[TOOL_CALLS]",
                                              "<|python_tag|>",
                                              "<tool",
                                              "[TOOL",
                                              "{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
                                              "{\"name\": \"g\", \"parameters\": {}}",
                                              "[",
                                              "]",
                                              "{",
                                              "}",
                                              "\"",
                                              "\\",
                                              ";",
                                              " ",
                                              "\n",
                                              "text",
                                              "ü",
                                              "{\"name\": 1}",
                                              ","};
  for (const ToolFormat format :
       {ToolFormat::Hermes, ToolFormat::Llama3Json, ToolFormat::Mistral}) {
    for (uint64_t n = 0; n < 3000; ++n) {
      fuzz::Rng rng{n * 7919 + uint64_t(format)};
      std::string text;
      for (size_t k = 1 + rng.below(12); k > 0; --k) text += fragments[rng.below(fragments.size())];
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i)
        if (rng.below(3) == 0) cuts.push_back(i);
      const ParsedOutput whole = parse_tool_calls(format, text);
      const Streamed s = feed_split(format, text, cuts);
      ASSERT_EQ(s.content, whole.content.value_or("")) << "case " << n << ": " << text;
      ASSERT_EQ(describe(s.calls), describe(whole.calls)) << "case " << n << ": " << text;
      if (whole.calls.empty()) {
        ASSERT_EQ(whole.content, text) << "case " << n;
      }
    }
  }
}

}  // namespace
}  // namespace hearth::gateway
