// The gateway's request reading, without HTTP: a body's bytes to a checked request. Every
// failure must be an ApiError 400 naming the field (never nlohmann's exceptions, which the HTTP
// layer turned into 500s), and every error body must dump, whatever the client sent.

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "ipc/serve_limits.h"
#include "gateway/api_error.h"
#include "gateway/openai_request.h"
#include "gateway/request_json.h"
#include "gateway/token_request.h"
#include "base/utf8.h"
#include "tests/gateway/api_error_of.h"

namespace hearth::gateway {
namespace {

using ordered_json = nlohmann::ordered_json;

ApiError completion_error(const std::string& body, Endpoint endpoint = Endpoint::Completions) {
  return error_of([&] { parse_completion_request(parse_request_body(body), endpoint, {}); });
}

// Every refusal: a 400, and a body that dumps.
void expect_400(const ApiError& e, const std::string& param, const std::string& context) {
  EXPECT_EQ(e.status(), 400) << context << ": " << e.what();
  EXPECT_EQ(e.param(), param) << context << ": " << e.what();
  EXPECT_NO_THROW((void)e.body().dump()) << context;
  EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
}

TEST(RequestBody, InvalidUtf8IsRefusedNamingTheByteBeforeAnythingElse) {
  const std::vector<std::string> bodies = {
      "{\"model\":\"fortunes\",\"prompt\":\"\xff\"}",  // the 36 bytes of issue 21
      "\xc0\x80",                                      // overlong, and not JSON either
      "{\"prompt\":\"\xed\xa0\x80\"}",                 // a surrogate
      "{\"prompt\":\"\xf4\x90\x80\x80\"}",             // past U+10FFFF
      "{\"a\":\"\xe2\x82\"}",                          // truncated
      "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\xff",
  };
  for (const std::string& body : bodies) {
    const ApiError e = error_of([&] { parse_request_body(body); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(std::string(e.what()), "the body is not valid UTF-8 (at byte " +
                                         std::to_string(*find_invalid_utf8(body)) + ")");
    EXPECT_NO_THROW((void)e.body().dump());
  }
}

TEST(RequestBody, NotJsonTooDeepOrNotAnObjectIsA400ThatNeverQuotesTheBody) {
  const ApiError syntax = error_of([] { parse_request_body("{\"model\": \"secret-words"); });
  EXPECT_EQ(syntax.status(), 400);
  EXPECT_NE(std::string(syntax.what()).find("not valid JSON"), std::string::npos);
  EXPECT_EQ(std::string(syntax.what()).find("secret-words"), std::string::npos) << syntax.what();
  const ApiError deep = error_of([] { parse_request_body(std::string(100000, '[')); });
  EXPECT_EQ(deep.status(), 400);
  EXPECT_NE(std::string(deep.what()).find("nested deeper"), std::string::npos) << deep.what();
  for (const char* body : {"[1]", "\"x\"", "5", "null"}) {
    const ApiError e = error_of([&] { parse_request_body(body); });
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_NE(std::string(e.what()).find("must be a JSON object"), std::string::npos);
  }
  EXPECT_NO_THROW(parse_request_body("{\"model\": \"caf\xc3\xa9\"}"));
}

// nlohmann's parser takes a NUL byte for the end of its input: a body went through with whatever
// followed one unread (`{...}\0{{{ garbage` was a 200). No JSON text holds a raw NUL.
TEST(RequestBody, ANulByteAnywhereIsA400NamingWhere) {
  const std::string good = R"({"model": "m", "prompt": "x"})";
  for (const std::string& body : {good + std::string(1, '\0'), good + std::string("\0{{{ x", 6),
                                  std::string("\0", 1) + good}) {
    const ApiError e = error_of([&] { parse_request_body(body); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("NUL byte (at byte " + std::to_string(body.find('\0'))),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(parse_request_body(R"({"prompt": "an escaped \u0000 is fine"})"));
}

// A leading UTF-8 byte order mark is skipped, as vLLM (Python's json.loads of the bytes) skips
// it; two of them, or a UTF-16/UTF-32 mark, are a 400 that names the mark.
TEST(RequestBody, OneUtf8ByteOrderMarkIsSkippedAndOtherMarksAreNamed) {
  const std::string good = R"({"model": "m", "prompt": "x"})";
  const std::string bom = "\xEF\xBB\xBF";
  EXPECT_EQ(parse_request_body(bom + good), parse_request_body(good));
  EXPECT_EQ(parse_request_body(bom + " \n" + good), parse_request_body(good));
  const std::pair<std::string, std::string> refused[] = {
      {bom + bom + good, "two UTF-8 byte order marks"},
      {"\xFF\xFE" + good, "UTF-16 or UTF-32 byte order mark"},
      {"\xFE\xFF" + good, "UTF-16 or UTF-32 byte order mark"},
      {bom + "\xFF\xFE" + good, "UTF-16 or UTF-32 byte order mark"},
      {bom, "not valid JSON"},
      {" " + bom + good, "not valid JSON"},  // only the first bytes may be a mark
  };
  for (const auto& [body, message] : refused) {
    const ApiError e = error_of([&] { parse_request_body(body); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.type(), "invalid_request_error");
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    EXPECT_NO_THROW((void)e.body().dump());
  }
}

TEST(RequestBody, AnErrorBodyDumpsWhateverItsMessageHolds) {
  const ApiError e(500, "server_error", "bad \xff bytes \xc3", "p\xfe");
  const std::string dumped = e.body().dump();
  EXPECT_NE(dumped.find("bad \xEF\xBF\xBD bytes \xEF\xBF\xBD"), std::string::npos) << dumped;
  EXPECT_NE(dumped.find("p\xEF\xBF\xBD"), std::string::npos);
}

TEST(RequestBody, ExcerptsAreShortAndValid) {
  EXPECT_EQ(excerpt(ordered_json(5)), "5");
  EXPECT_EQ(excerpt(ordered_json::array({1, 2})), "an array of 2 items");
  EXPECT_EQ(excerpt(ordered_json::object()), "an object");
  // A long string is cut at a character boundary (é is two bytes; 40 would split one).
  std::string s = "a";
  for (int i = 0; i < 100; ++i) s += "\xc3\xa9";
  const std::string cut = excerpt(ordered_json(s));
  EXPECT_LT(cut.size(), 50u);
  EXPECT_TRUE(is_valid_utf8(cut)) << cut;
  EXPECT_EQ(cut.substr(cut.size() - 3), "...");
}

struct WrongType {
  Endpoint endpoint;
  std::string field_json;  // the members that make the body wrong
  std::string param;
};

// Every field each endpoint reads, of a type it does not take.
TEST(CompletionRequest, EveryFieldOfTheWrongTypeIsA400NamingIt) {
  const auto C = Endpoint::Completions;
  const auto H = Endpoint::ChatCompletions;
  const std::vector<WrongType> cases = {
      {C, R"("prompt": 5)", "prompt"},
      {C, R"("prompt": {})", "prompt"},
      {C, R"("prompt": [])", "prompt"},
      {C, R"("prompt": [1, "a"])", "prompt"},
      {C, R"("prompt": [1.5])", "prompt"},
      {C, R"("prompt": [-1])", "prompt"},
      {C, R"("prompt": [4294967296])", "prompt"},
      {C, R"("prompt": ["x", {}])", "prompt[1]"},
      {C, R"("prompt": ["x", [1, null]])", "prompt[1]"},
      {C, R"("prompt": "x", "temperature": "hot")", "temperature"},
      {C, R"("prompt": "x", "temperature": [1])", "temperature"},
      {C, R"("prompt": "x", "top_p": "1")", "top_p"},
      {C, R"("prompt": "x", "top_k": 1.5)", "top_k"},
      {C, R"("prompt": "x", "min_p": true)", "min_p"},
      {C, R"("prompt": "x", "repetition_penalty": {})", "repetition_penalty"},
      {C, R"("prompt": "x", "seed": "1")", "seed"},
      {C, R"("prompt": "x", "seed": 1.5)", "seed"},
      {C, R"("prompt": "x", "max_tokens": "abc")", "max_tokens"},
      {C, R"("prompt": "x", "max_tokens": 18446744073709551615)", "max_tokens"},
      {C, R"("prompt": "x", "stop": 5)", "stop"},
      {C, R"("prompt": "x", "stop": [5])", "stop[0]"},
      {C, R"("prompt": "x", "stop": {"a": "b"})", "stop"},
      {C, R"("prompt": "x", "n": "2")", "n"},
      {C, R"("prompt": "x", "best_of": [])", "best_of"},
      {C, R"("prompt": "x", "stream": "yes")", "stream"},
      {C, R"("prompt": "x", "stream": true, "stream_options": 5)", "stream_options"},
      {C, R"("prompt": "x", "stream": true, "stream_options": {"include_usage": 1})",
       "stream_options.include_usage"},
      {C, R"("prompt": "x", "logprobs": true)", "logprobs"},
      {C, R"("prompt": "x", "ignore_eos": "no")", "ignore_eos"},
      {C, R"("prompt": "x", "cache_salt": 5)", "cache_salt"},
      {C, R"("prompt": "x", "frequency_penalty": "0")", "frequency_penalty"},
      {C, R"("prompt": "x", "presence_penalty": [])", "presence_penalty"},
      {C, R"("prompt": "x", "logit_bias": [])", "logit_bias"},
      {C, R"("prompt": "x", "response_format": 5)", "response_format"},
      {C, R"("prompt": "x", "response_format": {"type": 5})", "response_format.type"},
      {C, R"("prompt": "x", "echo": "no")", "echo"},
      {H, R"("messages": "hi")", "messages"},
      {H, R"("messages": [5])", "messages[0]"},
      {H, R"("messages": [{"role": 5, "content": "x"}])", "messages[0].role"},
      {H, R"("messages": [{"content": "x"}])", "messages[0].role"},
      {H, R"("messages": [{"role": "user", "content": 5}])", "messages[0].content"},
      {H, R"("messages": [{"role": "user", "content": [5]}])", "messages[0].content[0]"},
      {H, R"("messages": [{"role": "user", "content": [{"type": 5}]}])",
       "messages[0].content[0].type"},
      {H, R"("messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}])",
       "messages[0].content[0].text"},
      {H, R"("messages": [{"role": "user", "content": [{"type": "image_url"}]}])",
       "messages[0].content[0].type"},
      {H, R"("messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 5)",
       "add_generation_prompt"},
      {H, R"("messages": [{"role": "user", "content": "x"}], "tools": {})", "tools"},
      {H, R"("messages": [{"role": "user", "content": "x"}], "tool_choice": 5)", "tool_choice"},
      {H, R"("messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [])",
       "chat_template_kwargs"},
      {H, R"("messages": [{"role": "user", "content": "x"}], "logprobs": 2)", "logprobs"},
      {H, R"("messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 4,
             "max_tokens": "abc")",
       "max_tokens"},
      {H, R"("messages": [{"role": "user", "content": "x"}], "max_completion_tokens": "4")",
       "max_completion_tokens"},
  };
  for (const WrongType& c : cases) {
    const std::string body = R"({"model": "fortunes", )" + c.field_json + "}";
    expect_400(completion_error(body, c.endpoint), c.param, body);
  }
}

// OpenAI's prompt is a string, an array of strings, an array of token ids or an array of arrays
// of token ids: a list mixing strings and id arrays, an empty inner array, or ids that are not
// ids is a 400 naming the prompt (its item, when one is wrong) and saying why.
TEST(CompletionRequest, APromptIsOneOfOpenAIsFourShapes) {
  struct Case {
    std::string prompt, param, message;
  };
  const Case cases[] = {
      {R"(["a", [1, 2]])", "prompt[1]", "must be a string, as prompt[0] is"},
      {R"([[1, 2], "a"])", "prompt[1]", "must be an array of token ids, as prompt[0] is"},
      {R"([[1, 2], 3])", "prompt[1]", "must be an array of token ids, as prompt[0] is"},
      {R"(["a", 1])", "prompt[1]", "must be a string, as prompt[0] is"},
      {R"([[1, 2], []])", "prompt[1]", "must be a non-empty array of token ids"},
      {R"([[]])", "prompt[0]", "must be a non-empty array of token ids"},
      {R"([[1, [2]]])", "prompt[0]", "token ids must be integers"},
      {R"([[1, "a"]])", "prompt[0]", "token ids must be integers"},
      {R"([["a"]])", "prompt[0]", "token ids must be integers"},
      {R"([[1], [-7]])", "prompt[1]", "token ids must be integers in [0, 2147483647], got -7"},
      {R"([-1])", "prompt", "token ids must be integers in [0, 2147483647], got -1"},
      {R"([1, "a"])", "prompt", "token ids must be integers"},
      {R"([1, 2147483648])", "prompt", "token ids must be integers"},
      {R"([])", "prompt", "must be a string, an array of strings"},
      {R"([null])", "prompt[0]", "must be a string, an array of strings"},
      {R"([true])", "prompt[0]", "must be a string, an array of strings"},
      {R"([{}])", "prompt[0]", "must be a string, an array of strings"},
      {R"({})", "prompt", "must be a string, an array of strings"},
  };
  for (const Case& c : cases) {
    const std::string body = R"({"model": "fortunes", "prompt": )" + c.prompt + "}";
    const ApiError e = completion_error(body);
    expect_400(e, c.param, body);
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << body << ": " << e.what();
  }
  // Each of the four shapes, one prompt per item.
  const std::pair<std::string, size_t> good[] = {
      {R"("a")", 1}, {R"([1, 2])", 1}, {R"(["a", "b", ""])", 3}, {R"([[1], [2, 3]])", 2}};
  for (const auto& [prompt, count] : good) {
    const CompletionRequest r = parse_completion_request(
        parse_request_body(R"({"model": "fortunes", "prompt": )" + prompt + "}"),
        Endpoint::Completions, {});
    EXPECT_EQ(r.prompts.size(), count) << prompt;
  }
}

// A message's name is a string (the template prints it): a number, an object, an array or a
// boolean is a 400 naming it; null is no name, and the template is not given one.
TEST(CompletionRequest, AChatMessageNameIsAString) {
  for (const std::string name : {"5", "{}", R"({"a": 1})", R"(["x"])", "true"}) {
    const std::string body =
        R"({"model": "fortunes", "messages": [{"role": "user", "content": "x"},
           {"role": "user", "content": "y", "name": )" +
        name + "}]}";
    const ApiError e = completion_error(body, Endpoint::ChatCompletions);
    expect_400(e, "messages[1].name", body);
    EXPECT_NE(std::string(e.what()).find("must be a string"), std::string::npos) << e.what();
  }
  const auto messages = [](const std::string& name) {
    return parse_completion_request(
               parse_request_body(
                   R"({"model": "fortunes", "messages": [{"role": "user", "content": "x", "name": )" +
                   name + "}]}"),
               Endpoint::ChatCompletions, {})
        .prompts.at(0)
        .messages.at(0);
  };
  EXPECT_EQ(messages(R"("ann")").at("name"), "ann");
  EXPECT_FALSE(messages("null").contains("name"));
}

// gateway/README.md's "OpenAI fields" tables, row by row: every field they name "refused" is a
// 400 naming that field (or the part of it that is refused), whatever else the body holds.
TEST(CompletionRequest, EveryFieldTheReadmeRefusesIsA400NamingIt) {
  const auto C = Endpoint::Completions;
  const auto H = Endpoint::ChatCompletions;
  const std::string msg = R"("messages": [{"role": "user", "content": "x"}], )";
  const std::string tool =
      R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}})";
  const std::vector<WrongType> cases = {
      // Chat: OpenAI fields hearth does not have.
      {H, msg + R"("audio": {"voice": "alloy", "format": "wav"})", "audio"},
      {H, msg + R"("functions": [{"name": "f"}])", "functions"},
      {H, msg + R"("function_call": "auto")", "function_call"},
      {H, msg + R"("modalities": ["text", "audio"])", "modalities[1]"},
      {H, msg + R"("prediction": {"type": "content", "content": "x"})", "prediction"},
      {H, msg + R"("reasoning_effort": "low")", "reasoning_effort"},
      {H, msg + R"("verbosity": "low")", "verbosity"},
      {H, msg + R"("web_search_options": {})", "web_search_options"},
      // Chat: fields it has, with a value it refuses.
      {H, R"("messages": [{"role": "user", "content": [{"type": "image_url"}]}])",
       "messages[0].content[0].type"},
      {H, R"("messages": [{"role": "critic", "content": "x"}])", "messages[0].role"},
      {H, msg + R"("tool_choice": "required")", "tool_choice"},
      {H,
       msg + R"("tool_choice": {"type": "function", "function": {"name": "g"}}, "tools": [)" +
           tool + "]",
       "tool_choice.function.name"},
      {H, msg + R"("tools": [{"type": "custom", "custom": {"name": "f"}}])", "tools[0].type"},
      {H, msg + R"("tools": [{"type": "function", "function": {"name": "f", "strict": true}}])",
       "tools[0].function.strict"},
      {H, msg + R"("top_logprobs": 2)", "top_logprobs"},
      {H, msg + R"("response_format": {"type": "xml"})", "response_format.type"},
      {H, msg + R"("n": 17)", "n"},
      {H, msg + R"("n": 2, "best_of": 3)", "best_of"},
      {H, msg + R"("stream_options": {"include_usage": true})", "stream_options"},
      {H, msg + R"("stream": true, "stream_options": {"continuous_usage_stats": true})",
       "stream_options.continuous_usage_stats"},
      // Chat: completions' own fields.
      {H, msg + R"("prompt": "x")", "prompt"},
      {H, msg + R"("echo": true)", "echo"},
      {H, msg + R"("suffix": "x")", "suffix"},
      // Completions: fields hearth does not have, or refuses as given.
      {C, R"("prompt": "x", "suffix": "y")", "suffix"},
      {C, R"("prompt": "x", "echo": true, "logprobs": 1)", "echo"},
      {C, R"("prompt": "x", "best_of": 2)", "best_of"},
      {C, R"("prompt": "x", "n": 17)", "n"},
      {C, R"("prompt": ["a", "b", "c", "d", "e"], "n": 4)", "n"},
      {C, R"("prompt": "x", "logprobs": 21)", "logprobs"},
      {C, R"("prompt": "x", "stream_options": {"include_usage": true})", "stream_options"},
      // Completions: chat's own fields.
      {C, R"("prompt": "x", "messages": [])", "messages"},
      {C, R"("prompt": "x", "max_completion_tokens": 4)", "max_completion_tokens"},
      {C, R"("prompt": "x", "top_logprobs": 2)", "top_logprobs"},
      {C, R"("prompt": "x", "tools": [])", "tools"},
      {C, R"("prompt": "x", "tool_choice": "none")", "tool_choice"},
      {C, R"("prompt": "x", "parallel_tool_calls": true)", "parallel_tool_calls"},
      {C, R"("prompt": "x", "add_generation_prompt": true)", "add_generation_prompt"},
      {C, R"("prompt": "x", "chat_template_kwargs": {})", "chat_template_kwargs"},
      {C, R"("prompt": "x", "functions": [])", "functions"},
  };
  for (const WrongType& c : cases) {
    const std::string body = R"({"model": "fortunes", )" + c.field_json + "}";
    expect_400(completion_error(body, c.endpoint), c.param, body);
  }
}

// Accepted and ignored (the README's tables): changes nothing, but a wrong type is still a 400.
TEST(CompletionRequest, IgnoredFieldsAreAcceptedAndTypeChecked) {
  const std::string chat =
      R"({"model": "fortunes", "messages": [{"role": "user", "content": "x"}], )";
  const CompletionRequest plain = parse_completion_request(
      parse_request_body(chat + R"("seed": 1})"), Endpoint::ChatCompletions, {});
  const CompletionRequest ignored = parse_completion_request(
      parse_request_body(chat + R"("seed": 1, "user": "u", "safety_identifier": "s",
          "prompt_cache_key": "k", "store": false, "metadata": {"a": "b"},
          "service_tier": "auto", "modalities": ["text"], "stream": true,
          "stream_options": {"include_obfuscation": false}})"),
      Endpoint::ChatCompletions, {});
  EXPECT_EQ(worker_request_json(ignored, "c", {1}, 1), worker_request_json(plain, "c", {1}, 1));
  EXPECT_FALSE(ignored.include_usage);
  // An SDK that sends every field, unset ones as null: null is left out, even for a field
  // hearth refuses.
  const CompletionRequest nulls = parse_completion_request(
      parse_request_body(chat + R"("seed": 1, "functions": null, "audio": null,
          "web_search_options": null, "tool_choice": null, "stop": null, "suffix": null})"),
      Endpoint::ChatCompletions, {});
  EXPECT_EQ(worker_request_json(nulls, "c", {1}, 1), worker_request_json(plain, "c", {1}, 1));
  for (const char* f : {"safety_identifier", "prompt_cache_key", "user", "service_tier"})
    expect_400(completion_error(chat + "\"" + f + "\": 5}", Endpoint::ChatCompletions), f, f);
  expect_400(
      completion_error(chat + R"("stream": true, "stream_options": {"include_obfuscation": 1}})",
                       Endpoint::ChatCompletions),
      "stream_options.include_obfuscation", "include_obfuscation");
}

TEST(CompletionRequest, AMissingOrWrongModelIsA400NamingModel) {
  const std::vector<std::string> bodies = {
      R"({"prompt": "x"})", R"({"model": 5, "prompt": "x"})", R"({"model": null, "prompt": "x"})",
      R"({"model": "", "prompt": "x"})", R"({"model": ["fortunes"], "prompt": "x"})"};
  for (const std::string& body : bodies) {
    expect_400(error_of([&] { request_model(parse_request_body(body)); }), "model", body);
    expect_400(completion_error(body), "model", body);
  }
  const std::string long_name(kMaxModelNameBytes + 1, 'm');
  expect_400(error_of([&] {
               request_model(ordered_json{{"model", long_name}});
             }),
             "model", "long name");
  EXPECT_EQ(request_model(ordered_json{{"model", "fortunes:small"}}), "fortunes:small");
}

// Every string field's value is checked as UTF-8 with the body, before the field is read.
TEST(CompletionRequest, InvalidUtf8InEachStringFieldIsRefusedAsTheBody) {
  const std::vector<std::string> fields = {
      R"("model": "BAD", "prompt": "x")",
      R"("model": "fortunes", "prompt": "BAD")",
      R"("model": "fortunes", "prompt": ["ok", "BAD"])",
      R"("model": "fortunes", "prompt": "x", "stop": "BAD")",
      R"("model": "fortunes", "prompt": "x", "stop": ["BAD"])",
      R"("model": "fortunes", "prompt": "x", "cache_salt": "BAD")",
      R"("model": "fortunes", "prompt": "x", "user": "BAD")",
      R"("model": "fortunes", "prompt": "x", "BAD": 1)",
      R"("model": "fortunes", "messages": [{"role": "BAD", "content": "x"}])",
      R"("model": "fortunes", "messages": [{"role": "user", "content": "BAD"}])",
      R"("model": "fortunes", "messages": [{"role": "user", "content": [{"type": "text", "text": "BAD"}]}])",
      R"("model": "fortunes", "messages": [{"role": "user", "content": "x", "name": "BAD"}])",
  };
  for (const std::string& f : fields) {
    std::string body = "{" + f + "}";
    body.replace(body.find("BAD"), 3, "a\xff");
    const ApiError e = completion_error(body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(std::string(e.what()),
              "the body is not valid UTF-8 (at byte " + std::to_string(body.find('\xff')) + ")");
    EXPECT_NO_THROW((void)e.body().dump());
  }
}

TEST(CompletionRequest, FieldsThatTravelToTheWorkerAreBounded) {
  const auto with = [](const std::string& key, const ordered_json& value) {
    ordered_json body = {{"model", "fortunes"}, {"prompt", "x"}};
    body[key] = value;
    return body;
  };
  const auto parse = [](const ordered_json& body) {
    return parse_completion_request(body, Endpoint::Completions, {});
  };
  EXPECT_NO_THROW(parse(with("cache_salt", std::string(kMaxCacheSaltBytes, 's'))));
  expect_400(error_of([&] { parse(with("cache_salt", std::string(2 << 20, 's'))); }), "cache_salt",
             "a 2 MB salt");
  EXPECT_NO_THROW(parse(with("stop", std::string(kMaxStopStringBytes, 'z'))));
  expect_400(error_of([&] { parse(with("stop", std::string(kMaxStopStringBytes + 1, 'z'))); }),
             "stop", "a long stop string");
  expect_400(error_of([&] {
               parse(with("stop", ordered_json::array({"a", std::string(4096, 'z')})));
             }),
             "stop[1]", "a long stop string in a list");
  expect_400(
      error_of([&] { parse(with("stop", ordered_json(std::vector<std::string>(17, "a")))); }),
      "stop", "17 stop strings");
}

// The ranges are the engine's (request_settings_test.cc holds every edge): a value out of one
// is a 400 saying the engine's reason, named as the request spelled the field.
TEST(CompletionRequest, SettingRangesAreTheEnginesNamedAsTheRequestNamesThem) {
  const auto C = Endpoint::Completions;
  const auto H = Endpoint::ChatCompletions;
  const auto reason = [](const std::function<void()>& check) {
    try {
      check();
    } catch (const SettingError& e) {
      return e.reason();
    }
    return std::string("accepted");
  };
  struct Case {
    Endpoint endpoint;
    std::string field_json, param, reason;
  };
  const std::string messages = R"("messages": [{"role": "user", "content": "x"}], )";
  const std::vector<Case> cases = {
      {C, R"("temperature": -1)", "temperature", reason([] { checked_temperature(-1); })},
      {C, R"("top_p": 0)", "top_p", reason([] { checked_top_p(0); })},
      {C, R"("top_p": 1.5)", "top_p", reason([] { checked_top_p(1.5); })},
      {C, R"("top_k": -2)", "top_k", reason([] { checked_top_k(-2); })},
      {C, R"("min_p": 2)", "min_p", reason([] { checked_min_p(2); })},
      {C, R"("repetition_penalty": 0)", "repetition_penalty",
       reason([] { checked_repetition_penalty(0); })},
      {C, R"("max_tokens": 16777217)", "max_tokens", reason([] { checked_max_tokens(16777217); })},
      {C, R"("logprobs": 21)", "logprobs", reason([] { checked_logprobs(21); })},
      {C, R"("stop": ["a", ""])", "stop", reason([] { check_stop_strings({""}); })},
      {H, messages + R"("max_completion_tokens": 16777217)", "max_completion_tokens",
       reason([] { checked_max_tokens(16777217); })},
      {H, messages + R"("logprobs": true, "top_logprobs": 21)", "top_logprobs",
       reason([] { checked_logprobs(21); })},
      // OpenAI's own floor, stricter than the engine's 0.
      {C, R"("max_tokens": 0)", "max_tokens", "must be at least 1, got 0"},
  };
  for (const Case& c : cases) {
    const std::string prompt = c.endpoint == C ? R"("prompt": "x", )" : "";
    const std::string body = R"({"model": "m", )" + prompt + c.field_json + "}";
    const ApiError e = completion_error(body, c.endpoint);
    expect_400(e, c.param, body);
    ASSERT_NE(c.reason, "accepted") << body;
    EXPECT_EQ(std::string(e.what()), "'" + c.param + "': " + c.reason) << body;
  }
  // vLLM's "off" for top_k, which the engine says as 0.
  const CompletionRequest r = parse_completion_request(
      parse_request_body(R"({"model": "m", "prompt": "x", "top_k": -1})"), C, {});
  EXPECT_EQ(r.settings.sampling.top_k, 0);
}

TEST(CompletionRequest, PenaltiesAndLogitBiasReachTheWorkerRequest) {
  const CompletionRequest r = parse_completion_request(
      parse_request_body(R"({"model": "m", "prompt": "x", "presence_penalty": 0.5,
                             "frequency_penalty": -1.25, "logit_bias": {"17": -100, "3": 2.5}})"),
      Endpoint::Completions, {});
  EXPECT_EQ(r.settings.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(r.settings.sampling.frequency_penalty, -1.25f);
  EXPECT_EQ(r.settings.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{3, 2.5f}, {17, -100.0f}}));
  const nlohmann::json j = worker_request_json(r, "id", {1, 2}, 7);
  EXPECT_EQ(j["presence_penalty"], 0.5);
  EXPECT_EQ(j["frequency_penalty"], -1.25);
  EXPECT_EQ(j["logit_bias"], (nlohmann::json{{"3", 2.5}, {"17", -100.0}}));
  // Off by default: the worker request stays as it was.
  const CompletionRequest plain = parse_completion_request(
      parse_request_body(R"({"model": "m", "prompt": "x"})"), Endpoint::Completions, {});
  const nlohmann::json pj = worker_request_json(plain, "id", {1}, 7);
  EXPECT_FALSE(pj.contains("presence_penalty") || pj.contains("frequency_penalty") ||
               pj.contains("logit_bias"));
  for (const std::string bad : {R"("logit_bias": {"x1": 1})", R"("logit_bias": {"1": 101})",
                                R"("logit_bias": {"-1": 1})", R"("presence_penalty": 2.5)"}) {
    const std::string body = R"({"model": "m", "prompt": "x", )" + bad + "}";
    expect_400(completion_error(body),
               bad.find("logit") != std::string::npos ? "logit_bias" : "presence_penalty", body);
  }
}

TEST(CompletionRequest, APromptMustLeaveRoomInTheContext) {
  const CompletionRequest text = parse_completion_request(
      parse_request_body(R"({"model": "m", "prompt": "x", "max_tokens": 1})"),
      Endpoint::Completions, {});
  EXPECT_NO_THROW(check_prompt_fits(text, 511, 512));
  expect_400(error_of([&] { check_prompt_fits(text, 512, 512); }), "prompt", "512 of 512");
  expect_400(error_of([&] { check_prompt_fits(text, 300000, 512); }), "prompt", "300k of 512");
  expect_400(error_of([&] { check_prompt_fits(text, 0, 512); }), "prompt", "empty");
  const CompletionRequest chat = parse_completion_request(
      parse_request_body(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})"),
      Endpoint::ChatCompletions, {});
  expect_400(error_of([&] { check_prompt_fits(chat, 9000, 512); }), "messages", "chat");
  // Prompt and max_tokens together: OpenAI's code, vLLM's words (issue 24 item 5).
  const CompletionRequest wide = parse_completion_request(
      parse_request_body(R"({"model": "m", "prompt": "x", "max_tokens": 100})"),
      Endpoint::Completions, {});
  EXPECT_NO_THROW(check_prompt_fits(wide, 412, 512));
  const ApiError e = error_of([&] { check_prompt_fits(wide, 413, 512); });
  expect_400(e, "prompt", "413 + 100 of 512");
  EXPECT_EQ(e.code(), "context_length_exceeded");
  EXPECT_EQ(std::string(e.what()),
            "This model's maximum context length is 512 tokens. However, you requested 513 "
            "tokens (413 in the messages, 100 in the completion). Please reduce the length of "
            "the messages or completion.");
}

// The last guard: whatever the bounds, no submit frame over the worker's limit is sent.
TEST(CompletionRequest, ASubmitOverTheWorkersFrameLimitIsA400) {
  const CompletionRequest r = parse_completion_request(
      parse_request_body(R"({"model": "m", "prompt": "x"})"), Endpoint::Completions, {});
  const size_t kLimit = ipc::max_submit_bytes(512, 4096);  // the default model's worker
  const std::vector<int32_t> small(1000, 4095);
  EXPECT_NO_THROW(check_submit_size(r, worker_request_json(r, "cmpl-1-0", small, 1), kLimit));
  const std::vector<int32_t> big(300000, 4095);  // 1.5 MB of ids
  expect_400(
      error_of([&] { check_submit_size(r, worker_request_json(r, "cmpl-1-0", big, 1), kLimit); }),
      "prompt", "300k ids");
}

TEST(TokenRequests, WrongTypesAreA400NamingTheField) {
  const std::vector<std::pair<std::string, std::string>> tokenize = {
      {R"({"model": "m", "prompt": "x", "add_special_tokens": "x"})", "add_special_tokens"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
           "add_generation_prompt": 5})",
       "add_generation_prompt"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": 5}]}]})",
       "messages[0].content[0].type"},
      {R"({"model": "m", "prompt": 5})", "prompt"},
      {R"({"model": "m"})", "prompt"},
      {R"({"prompt": "x"})", "model"},
      {R"({"model": 5, "prompt": "x"})", "model"},
  };
  for (const auto& [body, param] : tokenize)
    expect_400(error_of([&] { parse_tokenize_request(parse_request_body(body)); }), param, body);
  const std::vector<std::pair<std::string, std::string>> detokenize = {
      {R"({"model": "m", "tokens": "1 2"})", "tokens"},
      {R"({"model": "m", "tokens": [1, "a"]})", "tokens"},
      {R"({"model": "m", "tokens": [-1]})", "tokens"},
      {R"({"model": "m", "tokens": [1.5]})", "tokens"},
      {R"({"model": "m"})", "tokens"},
      {R"({"tokens": [1]})", "model"},
  };
  for (const auto& [body, param] : detokenize)
    expect_400(error_of([&] { parse_detokenize_request(parse_request_body(body)); }), param, body);

  const TokenizeRequest t = parse_tokenize_request(
      parse_request_body(R"({"model": "m", "prompt": "x", "add_special_tokens": false})"));
  EXPECT_EQ(t.prompt, "x");
  EXPECT_FALSE(t.add_special_tokens);
  const TokenizeRequest m = parse_tokenize_request(
      parse_request_body(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})"));
  EXPECT_FALSE(m.prompt);
  EXPECT_FALSE(m.add_special_tokens);
  EXPECT_TRUE(m.add_generation_prompt);
  EXPECT_TRUE(parse_detokenize_request(parse_request_body(R"({"model": "m", "tokens": []})"))
                  .tokens.empty());
}

TEST(TokenRequests, IdsPastTheVocabularyAreA400) {
  EXPECT_NO_THROW(check_vocabulary({0, 4095}, 4096, "tokens"));
  const ApiError e = error_of([] { check_vocabulary({5, 4096}, 4096, "tokens"); });
  expect_400(e, "tokens", "4096 of 4096");
  EXPECT_NE(std::string(e.what()).find("4096 at position 1"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace hearth::gateway
