// hearth-gateway end to end: a real gateway, its own weight server (memfd) with the default
// model, CPU batching workers, HTTP on 127.0.0.1.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <future>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "ipc/client.h"
#include "tests/gateway/gateway_process.h"
#include "tests/gateway/shared_gateway.h"
#include "tests/gateway/node_client.h"
#include "tests/gateway/prometheus_text.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {
namespace {

class Gateway : public SharedGatewayTest {};

// A client that leaves mid-stream: `body` to /v1/completions on a raw connection to the gateway
// at `port`, the first bytes of the answer read, then the connection closed.
void send_and_hang_up(int port, const json& body) {
  const std::string payload = body.dump();
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(payload.size()) + "\r\n\r\n" + payload;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::write(fd, request.data(), request.size()), ssize_t(request.size()));
  char buf[4096];
  ASSERT_GT(::read(fd, buf, sizeof buf), 0);
  ::close(fd);
}

// The text a stream delivered for choice `index`, and its finish reason.
std::pair<std::string, std::string> streamed_choice(const std::vector<json>& events, int index,
                                                    bool chat) {
  std::string text, finish;
  for (const json& e : events) {
    if (!e.is_object() || !e.contains("choices")) continue;
    for (const json& c : e["choices"]) {
      if (c["index"] != index) continue;
      if (chat)
        text += c["delta"].value("content", "");
      else
        text += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
  }
  return {text, finish};
}

TEST_F(Gateway, HealthModelsAndMetricsAnswer) {
  EXPECT_EQ(gw().get("/health").status, 200);
  const auto models = gw().get("/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  const json m = models.parsed();
  EXPECT_EQ(m["object"], "list");
  ASSERT_FALSE(m["data"].empty());
  EXPECT_EQ(m["data"][0]["id"], "fortunes");
  EXPECT_EQ(m["data"][0]["object"], "model");
  const auto metrics = gw().get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("hearth:workers_alive"), std::string::npos) << metrics.body;
}

TEST_F(Gateway, CompletionHasOpenAIsShapeAndUsage) {
  const auto r = gw().post("/v1/completions", completion("A computer", 8, {{"temperature", 0}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.parsed();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "fortunes");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_TRUE(j["choices"][0]["text"].is_string());
  EXPECT_TRUE(j["choices"][0]["finish_reason"] == "length" ||
              j["choices"][0]["finish_reason"] == "stop");
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 8);
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(),
            j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() >= 0, true);
}

// A prompt sent again is served from the worker's prefix cache: the same text, usage reports
// the cached prompt tokens, and the metrics count the hits.
TEST_F(Gateway, ARepeatedPromptReportsCachedTokens) {
  const std::string prompt =
      "The lighthouse keeper counted the ships that passed each night, and wrote their names in "
      "a book that nobody else had ever read, until one winter";
  std::vector<json> replies;
  for (int i = 0; i < 2; ++i) {
    const auto r = gw().post("/v1/completions", completion(prompt, 6, {{"temperature", 0}}));
    ASSERT_EQ(r.status, 200) << r.body;
    replies.push_back(r.parsed());
  }
  EXPECT_EQ(replies[0]["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const int cached = replies[1]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GE(cached, 16);  // at least one whole block
  EXPECT_LT(cached, replies[1]["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(replies[1]["choices"][0]["text"], replies[0]["choices"][0]["text"]);
  const std::string metrics = gw().get("/metrics").body;
  const size_t at = metrics.find("hearth:prefix_cache_hits_total{");
  ASSERT_NE(at, std::string::npos) << metrics;
  const size_t value = metrics.find("} ", at);
  ASSERT_NE(value, std::string::npos);
  EXPECT_GE(std::stod(metrics.substr(value + 2)), double(cached)) << metrics.substr(at, 120);
}

TEST_F(Gateway, StreamingAndNonStreamingGiveTheSameText) {
  for (const json& params : {json{{"temperature", 0}}, json{{"temperature", 0.9}, {"seed", 7}}}) {
    json body = completion("Never", 24, params);
    body["ignore_eos"] = true;
    const auto whole = gw().post("/v1/completions", body);
    ASSERT_EQ(whole.status, 200) << whole.body;
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    const auto streamed = gw().post("/v1/completions", body);
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    const auto events = sse_events(streamed.body);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back(), "[DONE]");
    const auto [text, finish] = streamed_choice(events, 0, false);
    EXPECT_EQ(text, whole.parsed()["choices"][0]["text"].get<std::string>()) << params;
    EXPECT_EQ(finish, "length");
    const json usage = events[events.size() - 2]["usage"];
    EXPECT_EQ(usage["completion_tokens"], 24);
    EXPECT_EQ(usage, whole.parsed()["usage"]);
  }
}

TEST_F(Gateway, TheSameSeedGivesTheSameTokensAndNChoicesDiffer) {
  json body = completion("Once upon", 16, {{"temperature", 1.0}, {"seed", 42}, {"n", 3}});
  const json a = gw().post("/v1/completions", body).parsed();
  const json b = gw().post("/v1/completions", body).parsed();
  ASSERT_EQ(a["choices"].size(), 3u);
  EXPECT_EQ(a["choices"], b["choices"]);
  // Choice j is the request alone with seed + j.
  const json alone = gw().post("/v1/completions",
                               completion("Once upon", 16, {{"temperature", 1.0}, {"seed", 43}}))
                         .parsed();
  EXPECT_EQ(alone["choices"][0]["text"], a["choices"][1]["text"]);
}

TEST_F(Gateway, PromptsAsTokenIdsAndBatchesWork) {
  const json tok =
      gw().post("/tokenize", {{"model", "fortunes"}, {"prompt", "A computer"}}).parsed();
  ASSERT_TRUE(tok["tokens"].is_array()) << tok;
  EXPECT_EQ(tok["count"], tok["tokens"].size());
  const json by_text =
      gw().post("/v1/completions", completion("A computer", 6, {{"temperature", 0}})).parsed();
  json by_ids_body = completion("", 6, {{"temperature", 0}});
  by_ids_body["prompt"] = tok["tokens"];
  const json by_ids = gw().post("/v1/completions", by_ids_body).parsed();
  EXPECT_EQ(by_ids["choices"][0]["text"], by_text["choices"][0]["text"]);
  json batch = completion("", 6, {{"temperature", 0}});
  batch["prompt"] = {"A computer", "Never"};
  const json both = gw().post("/v1/completions", batch).parsed();
  ASSERT_EQ(both["choices"].size(), 2u) << both;
  EXPECT_EQ(both["choices"][0]["text"], by_text["choices"][0]["text"]);
  const json text =
      gw().post("/detokenize", {{"model", "fortunes"}, {"tokens", tok["tokens"]}}).parsed();
  EXPECT_NE(text["prompt"].get<std::string>().find("A computer"), std::string::npos) << text;
}

// No max_tokens: the context left after the prompt (vLLM's default), not a fixed budget. On the
// 512-token model a 507-token prompt gets its 5 tokens (it was a 400: 507 + 256 > 512), and a
// shorter one runs past 256 tokens.
TEST_F(Gateway, WithoutMaxTokensARequestGetsTheContextLeft) {
  std::vector<int> ids;
  for (int i = 0; i < 507; ++i) ids.push_back(2 + i % 50);
  const json body = {{"model", "fortunes"}, {"prompt", ids}, {"ignore_eos", true}};
  const auto reply = gw().post("/v1/completions", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json r = reply.parsed();
  EXPECT_EQ(r["usage"]["prompt_tokens"], 507) << r;
  EXPECT_EQ(r["usage"]["completion_tokens"], 5) << r;
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length") << r;
  // 250 tokens of prompt: 262 generated, past the old fixed 256.
  ids.resize(250);
  const json shorter =
      gw().post("/v1/completions", {{"model", "fortunes"}, {"prompt", ids}, {"ignore_eos", true}})
          .parsed();
  EXPECT_EQ(shorter["usage"]["completion_tokens"], 512 - 250) << shorter;
  // A prompt that fills the context leaves nothing: still a 400 naming the prompt.
  ids.resize(512, 2);
  const auto full = gw().post("/v1/completions", {{"model", "fortunes"}, {"prompt", ids}});
  EXPECT_EQ(full.status, 400) << full.body;
  EXPECT_EQ(full.parsed()["error"]["param"], "prompt") << full.body;
}

TEST_F(Gateway, StopStringsCutTheText) {
  const json free_text =
      gw().post("/v1/completions",
                completion("The", 40, {{"temperature", 0}, {"ignore_eos", true}}))
          .parsed();
  const std::string text = free_text["choices"][0]["text"];
  ASSERT_GT(text.size(), 6u);
  const std::string stop = text.substr(3, 2);
  const json cut =
      gw().post("/v1/completions", completion("The", 40, {{"temperature", 0}, {"stop", {stop}}}))
          .parsed();
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, text.find(stop)));
}

TEST_F(Gateway, LogprobsInBothShapes) {
  const json c =
      gw().post("/v1/completions",
                completion("A", 4, {{"temperature", 0}, {"logprobs", 2}, {"ignore_eos", true}}))
          .parsed();
  const json lp = c["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u) << c;
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  EXPECT_LE(lp["token_logprobs"][0].get<double>(), 0.0);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  const json chat =
      gw().post("/v1/chat/completions", {{"model", "fortunes"},
                                         {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                         {"max_tokens", 3},
                                         {"ignore_eos", true},
                                         {"logprobs", true},
                                         {"top_logprobs", 3}})
          .parsed();
  const json content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u) << chat;
  EXPECT_EQ(content[0]["top_logprobs"].size(), 3u);
  EXPECT_TRUE(content[0]["bytes"].is_array());
}

TEST_F(Gateway, LogitBiasAndPenaltiesReachTheSampler) {
  const json tok =
      gw().post("/tokenize",
                {{"model", "fortunes"}, {"prompt", "computer"}, {"add_special_tokens", false}})
          .parsed();
  ASSERT_FALSE(tok["tokens"].empty()) << tok;
  const int32_t t = tok["tokens"].back().get<int32_t>();
  // +100 on one token: greedy picks it at every step.
  const json c =
      gw().post("/v1/completions", completion("A", 4,
                                              {{"temperature", 0},
                                               {"ignore_eos", true},
                                               {"logit_bias", {{std::to_string(t), 100}}},
                                               {"presence_penalty", 0.5},
                                               {"frequency_penalty", 0.5}}))
          .parsed();
  // Four times the same token: the text is one piece four times over.
  const std::string text = c["choices"][0]["text"];
  ASSERT_EQ(c["usage"]["completion_tokens"], 4) << c;
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.size() % 4, 0u) << text;
  const std::string piece = text.substr(0, text.size() / 4);
  EXPECT_EQ(text, piece + piece + piece + piece);
  const auto r =
      gw().post("/v1/completions", completion("A", 4, {{"logit_bias", {{"99999999", 1}}}}));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.parsed()["error"]["param"], "logit_bias") << r.body;
}

TEST_F(Gateway, ChatCompletionsStreamAndNot) {
  json body = {
      {"model", "fortunes"},
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello"}}}},
      {"max_tokens", 12},
      {"temperature", 0}};
  const auto whole = gw().post("/v1/chat/completions", body);
  if (whole.status == 400 && whole.parsed()["error"]["message"].get<std::string>().find(
                                 "chat template") != std::string::npos)
    GTEST_SKIP() << "the default model has no chat template: " << whole.body;
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json j = whole.parsed();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  body["stream"] = true;
  const auto events = sse_events(gw().post("/v1/chat/completions", body).body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(streamed_choice(events, 0, true).first,
            j["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(Gateway, BadRequestsNameTheField) {
  struct Case {
    json body;
    int status;
    std::string param;
  };
  const std::vector<Case> cases = {
      {completion("x", 4, {{"temperature", "hot"}}), 400, "temperature"},
      {completion("x", 4, {{"top_p", 0}}), 400, "top_p"},
      {completion("x", 0), 400, "max_tokens"},
      {completion("x", 4, {{"n", 99}}), 400, "n"},
      {completion("x", 4, {{"stop", {""}}}), 400, "stop"},
      {completion("x", 4, {{"temprature", 1}}), 400, "temprature"},
      {completion("x", 4, {{"frequency_penalty", 3}}), 400, "frequency_penalty"},
      {json{{"model", "fortunes"}}, 400, "prompt"},
      {completion("x", 4, {{"model", "no-such-model"}}), 404, "model"},
      {completion("x", 4, {{"model", "fortunes:no-such-profile"}}), 404, "model"},
  };
  for (const Case& c : cases) {
    const auto r = gw().post("/v1/completions", c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.body;
    const json e = r.parsed();
    ASSERT_TRUE(e.contains("error")) << r.body;
    EXPECT_EQ(e["error"]["param"], c.param) << r.body;
    EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
  }
  // Longer than the context: the worker's check, answered as a 400.
  const auto too_long = gw().post("/v1/completions", completion("x", 1 << 20));
  EXPECT_EQ(too_long.status, 400) << too_long.body;
}

// Raw bytes, which need not be JSON or UTF-8 (json::dump refuses to write invalid UTF-8).
GatewayProcess::Reply post_raw(const GatewayProcess& gw, const std::string& path,
                               const std::string& body) {
  auto r = gw.client()->Post(path.c_str(), body, "application/json");
  if (!r)
    throw std::runtime_error("no HTTP response from the gateway for " + path + " (" +
                             httplib::to_string(r.error()) + "): did it crash?\n" + gw.log_text());
  return {r->status, r->body, r->headers};
}

// Issue 21: a raw invalid byte anywhere in a body made the parse error's text (which quoted it)
// throw out of the 400's dump: std::terminate, the gateway gone. Now it is refused before
// anything reads the body, naming the byte.
TEST_F(Gateway, InvalidUtf8AnywhereInTheBodyIsA400AndTheGatewayCarriesOn) {
  const std::string chat = "/v1/chat/completions";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/v1/completions", "{\"model\":\"fortunes\",\"prompt\":\"\xff\"}"},
      {"/v1/completions", "{\"model\":\"fortunes\",\"prompt\":\"ok\",\"stop\":[\"\xc3\"]}"},
      {"/v1/completions", "{\"model\":\"fort\xed\xa0\x80unes\",\"prompt\":\"x\"}"},
      {chat, "{\"model\":\"fortunes\",\"messages\":[{\"role\":\"user\",\"content\":\"\xfe\"}]}"},
      {chat, "{\"model\":\"fortunes\",\"messages\":[{\"role\":\"us\xc0\x80\",\"content\":\"x\"}]}"},
      {"/tokenize", "{\"model\":\"fortunes\",\"prompt\":\"\xf4\x90\x80\x80\"}"},
      {"/detokenize", "{\"model\":\"fortunes\",\"tokens\":[1],\"x\":\"\xff\"}"},
      {"/v1/completions", "\xff{}"},
  };
  for (const auto& [path, body] : cases) {
    const auto r = post_raw(gw(), path, body);
    EXPECT_EQ(r.status, 400) << path << " " << r.body;
    const json e = r.parsed();
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r.body;
    const std::string message = e["error"]["message"];
    const size_t at = body.find_first_of("\xff\xfe\xc3\xc0\xed\xf4");
    EXPECT_EQ(message, "the body is not valid UTF-8 (at byte " + std::to_string(at) + ")");
  }
  EXPECT_EQ(gw().get("/health").status, 200);
}

// Issue 21: wrong JSON types reached nlohmann's .value()/.get<>() and came back as 500s quoting
// a json.exception; an id past the vocabulary detokenized to "" with 200; a missing model was a
// 404. Each is now a 400 that names the field.
TEST_F(Gateway, WrongTypesAreA400NamingTheField) {
  const json user = {{{"role", "user"}, {"content", "Hi"}}};
  struct Case {
    std::string path;
    json body;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"/tokenize",
       {{"model", "fortunes"}, {"prompt", "x"}, {"add_special_tokens", "x"}},
       "add_special_tokens"},
      {"/tokenize",
       {{"model", "fortunes"}, {"messages", user}, {"add_generation_prompt", 5}},
       "add_generation_prompt"},
      {"/tokenize", {{"model", "fortunes"}, {"prompt", 5}}, "prompt"},
      {"/tokenize", {{"prompt", "x"}}, "model"},
      {"/detokenize", {{"model", "fortunes"}, {"tokens", {4096}}}, "tokens"},
      {"/detokenize", {{"model", "fortunes"}, {"tokens", {"a"}}}, "tokens"},
      {"/v1/chat/completions",
       {{"model", "fortunes"}, {"messages", {{{"role", "user"}, {"content", {{{"type", 5}}}}}}}},
       "messages[0].content[0].type"},
      {"/v1/chat/completions",
       {{"model", "fortunes"},
        {"messages", user},
        {"max_completion_tokens", 4},
        {"max_tokens", "abc"}},
       "max_tokens"},
      {"/v1/completions", completion("x", 4, {{"response_format", {{"type", 5}}}}),
       "response_format.type"},
      {"/v1/completions", completion("x", 4, {{"response_format", 5}}), "response_format"},
      {"/v1/completions", {{"prompt", "x"}}, "model"},
      {"/v1/completions", completion("x", 4, {{"model", 5}}), "model"},
      {"/v1/chat/completions", {{"model", nullptr}, {"messages", user}}, "model"},
  };
  for (const Case& c : cases) {
    const auto r = gw().post(c.path, c.body);
    EXPECT_EQ(r.status, 400) << c.path << " " << c.body << " -> " << r.body;
    const json e = r.parsed();
    ASSERT_TRUE(e.contains("error")) << r.body;
    EXPECT_EQ(e["error"]["param"], c.param) << c.body << " -> " << r.body;
    EXPECT_EQ(e["error"]["message"].get<std::string>().find("json.exception"), std::string::npos)
        << r.body;
  }
}

// Issue 21: a 2 MB cache_salt, or a text prompt of more than 1 MiB of token ids, made a submit
// frame over the worker's limit; the worker dropped the gateway's connection and every stream
// on it ended with an error (the sender got 503). Now the gateway refuses them with a 400
// naming the field before anything reaches the worker, and a stream running beside them ends
// as it would alone.
TEST_F(Gateway, AnOversizedRequestIsA400AndLeavesOtherStreamsAlone) {
  std::string words;
  for (int i = 0; i < 150000; ++i) words += "the cat ";  // ~300k tokens: over 1 MiB of ids
  const std::vector<std::pair<json, std::string>> oversized = {
      {completion("x", 4, {{"cache_salt", std::string(2 << 20, 's')}}), "cache_salt"},
      {completion(words, 4), "prompt"},
      {completion("x", 4, {{"stop", {std::string(4096, 'z')}}}), "stop[0]"},
  };
  const std::string stream_body =
      completion("Beside", 120, {{"ignore_eos", true}, {"stream", true}, {"temperature", 0}})
          .dump();
  std::string body;
  bool sent = false;
  std::vector<GatewayProcess::Reply> replies;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = stream_body;
  // Once the stream's first bytes arrive its request is in the worker: send the others then.
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    body.append(data, n);
    if (!sent) {
      sent = true;
      for (const auto& [big, param] : oversized)
        replies.push_back(gw().post("/v1/completions", big));
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  ASSERT_TRUE(gw().client()->send(req, res, err)) << httplib::to_string(err);
  ASSERT_EQ(replies.size(), oversized.size());
  for (size_t i = 0; i < replies.size(); ++i) {
    EXPECT_EQ(replies[i].status, 400) << replies[i].body;
    EXPECT_EQ(replies[i].parsed()["error"]["param"], oversized[i].second) << replies[i].body;
  }
  const auto events = sse_events(body);
  for (const json& e : events) EXPECT_FALSE(e.is_object() && e.contains("error")) << e;
  EXPECT_EQ(streamed_choice(events, 0, false).second, "length") << body;
  EXPECT_NE(gw().get("/metrics").body.find("hearth:worker_restarts_total 0"), std::string::npos);
}

TEST_F(Gateway, MalformedHttpAndJsonAreRefusedAndTheServerCarriesOn) {
  auto c = gw().client();
  auto bad_json = c->Post("/v1/completions", "{\"model\": ", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  std::string deep(100000, '[');
  auto deep_json = c->Post("/v1/completions", deep, "application/json");
  ASSERT_TRUE(deep_json);
  EXPECT_EQ(deep_json->status, 400);
  auto huge = c->Post("/v1/completions", std::string(17u << 20, ' '), "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  // Garbage that is not HTTP at all, on a raw socket.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(gw().port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string garbage = "\x16\x03\x01 not http at all\r\n\r\n";
  ASSERT_GT(::write(fd, garbage.data(), garbage.size()), 0);
  char buf[256];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  EXPECT_GT(n, 0);  // an error response, not a hang
  EXPECT_EQ(gw().get("/health").status, 200);
}

TEST_F(Gateway, SixtyFourConcurrentStreamsEachMatchTheirRequestAlone) {
  constexpr int kStreams = 64;
  auto body_of = [](int i) {
    return completion(
        "Stream " + std::to_string(i % 8), 12,
        {{"temperature", i % 2 ? 0.8 : 0.0}, {"seed", i}, {"ignore_eos", true}, {"stream", true}});
  };
  auto text_of = [&](int i) {
    return streamed_choice(sse_events(gw().post("/v1/completions", body_of(i)).body), 0, false)
        .first;
  };
  std::vector<std::string> alone;
  for (int i = 0; i < kStreams; ++i) alone.push_back(text_of(i));
  std::vector<std::future<std::string>> together;
  for (int i = 0; i < kStreams; ++i)
    together.push_back(std::async(std::launch::async, [&, i] { return text_of(i); }));
  for (int i = 0; i < kStreams; ++i) {
    const std::string text = together[i].get();
    EXPECT_FALSE(text.empty()) << "stream " << i;
    EXPECT_EQ(text, alone[i]) << "stream " << i;
  }
}

TEST_F(Gateway, AClientThatDisconnectsMidStreamFreesItsSlot) {
  const auto abort_count = [] {
    const double n = test::PromText(gw().get("/metrics").body)
                         .value("hearth:request_success_total",
                                {{"model_name", "fortunes"}, {"finished_reason", "abort"}});
    return std::isnan(n) ? 0.0 : n;
  };
  const double aborts_before = abort_count();
  // A raw connection: send a long streaming request, read the first bytes, hang up.
  ASSERT_NO_FATAL_FAILURE(send_and_hang_up(
      gw().port(), completion("Disconnect", 400, {{"ignore_eos", true}, {"stream", true}})));
  // The worker ends the request because of the cancel: the gateway counts one more abort (a
  // pool that drained when the 400 tokens ran out would count a "length"), and the stats that
  // came with that end show nothing running, nothing held in the KV pool.
  bool aborted = false;
  for (int tries = 0; tries < 600 && !aborted; ++tries) {
    aborted = abort_count() == aborts_before + 1;
    if (!aborted) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(aborted) << gw().get("/metrics").body;
  const test::PromText m(gw().get("/metrics").body);
  EXPECT_EQ(m.value("hearth:num_requests_running", {{"model_name", "fortunes"}}), 0);
  EXPECT_EQ(m.value("hearth:kv_cache_usage_perc", {{"model_name", "fortunes"}}), 0);
}

// The gateway's cancel reaches the worker. It once sent {"id": ...}, which the worker refused
// (it reads "request_id") and the refusal went unseen: a dropped stream ran to its end. Asked
// over the worker's own socket, its stats count the request aborted, and it stopped long
// before its 480 tokens (a pool that drains by itself would show neither).
TEST(GatewayWorkers, ADroppedStreamIsCancelledAtTheWorker) {
  GatewayProcess gw;
  ASSERT_EQ(gw.post("/v1/completions", completion("Warm", 1)).status, 200);  // a worker runs
  std::smatch m;
  const std::string log = gw.log_text();
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(worker fortunes started \(pid (\d+))")))
      << log;
  // The worker's socket, from its command line (NUL-separated arguments).
  std::ifstream cmdline("/proc/" + m[1].str() + "/cmdline");
  std::vector<std::string> args;
  for (std::string arg; std::getline(cmdline, arg, '\0');) args.push_back(arg);
  const auto serve = std::find(args.begin(), args.end(), "--serve");
  ASSERT_TRUE(serve != args.end() && serve + 1 != args.end());
  ipc::ClientOptions options;
  options.name = "test";
  ipc::Client worker = ipc::Client::connect(*(serve + 1), options);

  ASSERT_NO_FATAL_FAILURE(send_and_hang_up(
      gw.port(), completion("Dropped", 480, {{"ignore_eos", true}, {"stream", true}})));
  // Until the request has ended, one way or the other.
  json stats;
  for (int tries = 0; tries < 6000; ++tries) {
    stats = worker.call("stats").body;
    if (stats["finished"] == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(stats["finished"], 2) << stats.dump();
  EXPECT_EQ(stats["aborted"], 1) << stats.dump();
  EXPECT_EQ(stats["running"], 0) << stats.dump();
  EXPECT_LT(stats["generated_tokens"].get<int>(), 1 + 480) << stats.dump();
  // The gateway counts it: an abort, once the worker's "cancelled" end reached it (the session
  // of a client that left must outlive the client to hear it).
  const std::regex aborted(
      R"(hearth:request_success_total\{finished_reason="abort",model_name="fortunes"\} 1)");
  bool counted = false;
  for (int tries = 0; tries < 600 && !counted; ++tries) {
    counted = std::regex_search(gw.get("/metrics").body, aborted);
    if (!counted) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(counted) << gw.get("/metrics").body;
}

// A stream past --request-timeout-s ends with a 504 event, and the gateway cancels it in the
// worker. The worker is stopped (SIGSTOP) once tokens flow, so the deadline, not the end of the
// generation, ends the stream; let go after the 504, the worker reads the cancel and ends the
// request as aborted (one it ran to its end would be a "length").
TEST(GatewayWorkers, AStreamPastItsTimeLimitIsCancelledAtTheWorker) {
  GatewayProcess gw({"--request-timeout-s", "1"});
  ASSERT_EQ(gw.post("/v1/completions", completion("Warm", 1)).status, 200);  // a worker runs
  std::smatch m;
  const std::string log = gw.log_text();
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(worker fortunes started \(pid (\d+))")))
      << log;
  const pid_t worker = std::stoi(m[1]);
  std::string body;
  bool stopped = false;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = completion("Late", 480, {{"ignore_eos", true}, {"stream", true}}).dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    body.append(data, n);
    if (!stopped) stopped = ::kill(worker, SIGSTOP) == 0;
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  const bool sent = gw.client()->send(req, res, err);
  ::kill(worker, SIGCONT);
  ASSERT_TRUE(sent) << httplib::to_string(err);
  ASSERT_TRUE(stopped);
  EXPECT_NE(body.find("timeout_error"), std::string::npos) << body;
  const auto count = [&](const char* reason) {
    const double n = test::PromText(gw.get("/metrics").body)
                         .value("hearth:request_success_total",
                                {{"model_name", "fortunes"}, {"finished_reason", reason}});
    return std::isnan(n) ? 0.0 : n;
  };
  bool aborted = false;
  for (int tries = 0; tries < 600 && !aborted; ++tries) {
    aborted = count("abort") == 1;
    if (!aborted) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(aborted) << gw.get("/metrics").body;
  EXPECT_EQ(count("length"), 1);  // the warm-up's only
}

// /metrics sends nothing to a worker: it reads the stats the worker pushed with its last events
// reply. With the worker stopped (SIGSTOP: it can answer nothing), the gateway's first scrape
// still shows the prefix-cache queries of the request it ran and its KV freed, values only
// the worker's push could have carried (a stats call would wait on the stopped worker, then
// leave the series at 0).
TEST(GatewayWorkers, MetricsReadTheStatsAWorkerPushedWithoutAskingIt) {
  GatewayProcess gw;
  const std::string prompt = "The lighthouse keeper counted the ships that passed each night";
  ASSERT_EQ(gw.post("/v1/completions", completion(prompt, 2)).status, 200);
  std::smatch m;
  const std::string log = gw.log_text();
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(worker fortunes started \(pid (\d+))")))
      << log;
  const pid_t worker = std::stoi(m[1]);
  ASSERT_EQ(::kill(worker, SIGSTOP), 0);
  // A client more patient than any test, less than the gateway's 30 s wait for a worker's
  // reply: a gateway that asked the stopped worker fails here instead of hanging the test.
  httplib::Result scrape = gw.client(20)->Get("/metrics");
  ::kill(worker, SIGCONT);
  ASSERT_TRUE(scrape) << httplib::to_string(scrape.error());
  ASSERT_EQ(scrape->status, 200);
  const std::string& metrics = scrape->body;
  const std::regex queries(R"(hearth:prefix_cache_queries_total\{model_name="fortunes"\} (\S+))");
  const std::regex running(R"(hearth:num_requests_running\{model_name="fortunes"\} (\S+))");
  const std::regex kv(R"(hearth:kv_cache_usage_perc\{model_name="fortunes"\} (\S+))");
  ASSERT_TRUE(std::regex_search(metrics, m, queries)) << metrics;
  EXPECT_GT(std::stod(m[1]), 0) << metrics;
  ASSERT_TRUE(std::regex_search(metrics, m, running)) << metrics;
  EXPECT_EQ(std::stod(m[1]), 0) << metrics;
  ASSERT_TRUE(std::regex_search(metrics, m, kv)) << metrics;
  EXPECT_EQ(std::stod(m[1]), 0) << metrics;
}

// A model served by two workers (the default profile and "small"): its gauges are their sum, so
// two requests running, one on each, read 2 (each worker once overwrote the other's count);
// without traffic two scrapes are the same text, counters included (prefix_cache_queries_total
// once grew at every scrape); every scrape is valid exposition text.
TEST(GatewayWorkers, AModelsProfilesAreSummedAndAQuietScrapeMovesNothing) {
  const std::string profile = (test::process_scratch_dir() / "gateway-profile-small.json").string();
  std::ofstream(profile) << R"({"max_running": 8})";
  GatewayProcess gw({"--profile", "small=" + profile});
  for (const char* model : {"fortunes", "fortunes:small"})
    ASSERT_EQ(gw.post("/v1/completions", completion("Warm", 1, {{"model", model}})).status, 200);
  auto run = [&](const char* model) {
    return std::async(std::launch::async, [&gw, model] {
      return gw.post("/v1/completions",
                     completion("Both", 480, {{"model", model}, {"ignore_eos", true}}));
    });
  };
  auto a = run("fortunes"), b = run("fortunes:small");
  double most = 0;
  const auto done = [](auto& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  };
  while (most < 2 && !(done(a) && done(b))) {
    const test::PromText scrape(gw.get("/metrics").body);
    most =
        std::max(most, scrape.value("hearth:num_requests_running", {{"model_name", "fortunes"}}));
  }
  EXPECT_EQ(a.get().status, 200);
  EXPECT_EQ(b.get().status, 200);
  EXPECT_EQ(most, 2);
  const std::string first = gw.get("/metrics").body;
  const std::string second = gw.get("/metrics").body;
  const test::PromText parsed(second);
  EXPECT_GT(parsed.value("hearth:prefix_cache_queries_total", {{"model_name", "fortunes"}}), 0);
  EXPECT_EQ(parsed.value("hearth:num_requests_running", {{"model_name", "fortunes"}}), 0);
  EXPECT_EQ(parsed.value("hearth:cache_config_info", {{"profile", "small"}}), 1);
  EXPECT_EQ(first, second);
}

TEST(GatewayLimits, AnApiKeyIsRequiredWhenConfigured) {
  const std::string key_file = (test::process_scratch_dir() / "gateway-key").string();
  std::ofstream(key_file) << "s3cret\n";
  GatewayProcess gw({"--api-key-file", key_file});
  EXPECT_EQ(gw.get("/v1/models").status, 401);
  EXPECT_EQ(gw.get("/v1/models", {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(gw.get("/v1/models", {{"Authorization", "Bearer s3cret"}}).status, 200);
  EXPECT_EQ(gw.get("/health").status, 200);
}

TEST(GatewayLimits, AFullQueueAnswers429WithRetryAfter) {
  GatewayProcess gw({"--max-in-flight", "1"});
  ASSERT_EQ(gw.post("/v1/completions", completion("Warm", 1)).status, 200);  // a worker runs
  const std::regex running(R"(hearth:num_requests_running\{model_name="fortunes"\} ([1-9]))");
  GatewayProcess::Reply refused, unread;
  // A request long enough to still be in flight when the next ones arrive: longer each try, as
  // machines (and sanitizer builds) differ by orders of magnitude.
  for (int tokens = 40; tokens <= 480 && (refused.status != 429 || unread.status != 429);
       tokens *= 2) {
    const json long_body = completion("Slow", tokens, {{"ignore_eos", true}, {"n", 2}});
    auto slow =
        std::async(std::launch::async, [&] { return gw.post("/v1/completions", long_body); });
    // Once the worker reports it running, the one slot is taken.
    bool seen = false;
    while (slow.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready &&
           !(seen = std::regex_search(gw.get("/metrics").body, running))) {
    }
    if (seen) {
      refused = gw.post("/v1/completions", completion("Fast", 1));
      // Refused before its body is read: a model that does not exist (404 once read) is a 429.
      unread = gw.post("/v1/completions", completion("Fast", 1, {{"model", "no-such-model"}}));
    }
    EXPECT_EQ(slow.get().status, 200);
  }
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(unread.status, 429) << unread.body;
  EXPECT_TRUE(refused.headers.count("Retry-After"));
  EXPECT_EQ(refused.parsed()["error"]["type"], "rate_limit_error");
  EXPECT_EQ(gw.post("/v1/completions", completion("Fast", 1)).status, 200);  // room again
}

TEST(GatewayWorkers, AWorkerKilledMidStreamFailsItsStreamsAndTheNextRequestSucceeds) {
  GatewayProcess gw;
  // Start the worker, then find its pid in the gateway's log.
  ASSERT_EQ(gw.post("/v1/completions", completion("Warm", 1)).status, 200);
  const std::regex started(R"(worker fortunes started \(pid (\d+))");
  std::smatch m;
  const std::string log = gw.log_text();
  ASSERT_TRUE(std::regex_search(log, m, started)) << log;
  const pid_t worker = std::stoi(m[1]);
  // Kill the worker as soon as the stream has started.
  std::string body;
  bool killed = false;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = completion("Killed", 480, {{"ignore_eos", true}, {"stream", true}, {"n", 8}}).dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    body.append(data, n);
    if (!killed) killed = ::kill(worker, SIGKILL) == 0;
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  ASSERT_TRUE(gw.client()->send(req, res, err)) << httplib::to_string(err);
  ASSERT_TRUE(killed);
  GatewayProcess::Reply r{res.status, body, res.headers};
  const auto events = sse_events(r.body);
  ASSERT_FALSE(events.empty()) << r.body;
  bool error_event = false;
  for (const json& e : events) error_event |= e.is_object() && e.contains("error");
  EXPECT_TRUE(error_event) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  const auto next = gw.post("/v1/completions", completion("After", 4));
  EXPECT_EQ(next.status, 200) << next.body;
  EXPECT_NE(gw.get("/metrics").body.find("hearth:worker_restarts_total 1"), std::string::npos);
}

}  // namespace
}  // namespace hearth::test

namespace hearth::test {
namespace {

// The official openai npm client (tests/gateway/node, installed by tools/run-tests.sh).
TEST(OpenAIClient, CompletesStreamsAndChatsAgainstTheGateway) {
  if (!openai_npm_installed()) GTEST_SKIP() << openai_npm_missing();
  GatewayProcess gw;
  const NodeTestRun run =
      run_node_test("openai_client_test.mjs",
                    {"HEARTH_GATEWAY_URL=http://127.0.0.1:" + std::to_string(gw.port()) + "/v1"});
  ASSERT_TRUE(run.finished) << "node did not finish";
  EXPECT_TRUE(run.success) << run.out << run.err << gw.log_text();
  EXPECT_TRUE(run.none_failed()) << run.out;
}

}  // namespace
}  // namespace hearth::test
