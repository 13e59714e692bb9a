// A completion request in flight, against a real CPU worker: choice j of n samples with seed + j
// (so each is the request alone with that seed), a stream carries the same text as the whole
// response and ends with usage and [DONE], a refusal by the worker is the client's 400, and a
// cancel or a deadline stops the choices in the worker instead of letting them run on.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gateway/api_error.h"
#include "gateway/completion_session.h"
#include "gateway/openai_request.h"
#include "gateway/request_json.h"
#include "tests/gateway/served_workers.h"
#include "tests/ipc/test_util.h"

namespace hearth::gateway {
namespace {

using json = nlohmann::json;
using Clock = CompletionSession::Clock;

class CompletionSessionTest : public ::testing::Test {
 protected:
  // A session for `body` (a completions request to "tiny"), started on the pool's worker.
  std::shared_ptr<CompletionSession> start(const std::string& body) {
    CompletionRequest request = parse_completion_request(parse_request_body(body),
                                                         Endpoint::Completions, w_.tiny().defaults);
    std::vector<std::vector<int32_t>> prompts;
    for (const PromptInput& p : request.prompts)
      prompts.push_back(w_.tiny().tokenizer->encode(*p.text, /*add_special_tokens=*/true));
    const uint64_t seed = request.settings.sampling.seed;
    ResponseMeta meta{"cmpl-test-" + std::to_string(++next_id_), 0, request.model};
    auto session = std::make_shared<CompletionSession>(std::move(request), meta, w_.tiny(),
                                                       worker(), metrics_);
    session->start(prompts, seed);
    return session;
  }

  json complete(const std::string& body) {
    return start(body)->wait_response(Clock::now() + std::chrono::seconds(120));
  }

  std::shared_ptr<WorkerConnection> worker() { return w_.pool.get("tiny", ""); }

  ServedWorkers w_;
  Metrics metrics_;
  int next_id_ = 0;
};

TEST_F(CompletionSessionTest, ChoiceJOfNIsTheRequestAloneWithSeedPlusJ) {
  const std::string sampled =
      R"("model": "tiny", "prompt": "Once upon", "max_tokens": 12, "temperature": 1.0,
         "ignore_eos": true)";
  const json both = complete("{" + sampled + R"(, "n": 2, "seed": 40})");
  const json alone0 = complete("{" + sampled + R"(, "seed": 40})");
  const json alone1 = complete("{" + sampled + R"(, "seed": 41})");
  ASSERT_EQ(both["choices"].size(), 2u);
  // The seeds make a difference here (fixed seeds: this holds or fails every run alike).
  ASSERT_NE(alone0["choices"][0]["text"], alone1["choices"][0]["text"]);
  EXPECT_EQ(both["choices"][0]["index"], 0);
  EXPECT_EQ(both["choices"][1]["index"], 1);
  EXPECT_EQ(both["choices"][0]["text"], alone0["choices"][0]["text"]);
  EXPECT_EQ(both["choices"][1]["text"], alone1["choices"][0]["text"]);
  EXPECT_EQ(both["choices"][0]["finish_reason"], "length");
  // The prompt counts once, the completions of both choices add up.
  EXPECT_EQ(both["usage"]["prompt_tokens"], alone0["usage"]["prompt_tokens"]);
  EXPECT_EQ(both["usage"]["completion_tokens"], 24);
}

TEST_F(CompletionSessionTest, AStreamCarriesTheWholeTextThenUsageThenDone) {
  const std::string request =
      R"("model": "tiny", "prompt": "Once upon", "max_tokens": 10, "temperature": 1.0,
         "seed": 5, "ignore_eos": true)";
  const json whole = complete("{" + request + "}");
  auto session =
      start("{" + request + R"(, "stream": true, "stream_options": {"include_usage": true}})");
  std::string sse;
  while (auto more = session->next_sse(Clock::now() + std::chrono::seconds(120))) {
    ASSERT_FALSE(more->empty()) << "nothing within the deadline";
    sse += *more;
  }
  // Every event is "data: JSON\n\n"; the last is [DONE], the one before it the usage.
  std::vector<std::string> events;
  for (size_t at = 0; at < sse.size();) {
    const size_t end = sse.find("\n\n", at);
    ASSERT_NE(end, std::string::npos) << sse.substr(at);
    ASSERT_EQ(sse.compare(at, 6, "data: "), 0) << sse.substr(at, end - at);
    events.push_back(sse.substr(at + 6, end - at - 6));
    at = end + 2;
  }
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 10);
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_TRUE(chunk["usage"].is_null());  // null on all but the last chunk
    text += chunk["choices"][0]["text"].get<std::string>();
    if (chunk["choices"][0]["finish_reason"].is_string())
      finish = chunk["choices"][0]["finish_reason"].get<std::string>();
  }
  EXPECT_EQ(text, whole["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(finish, "length");
  // Everything was taken: the stream stays closed.
  EXPECT_FALSE(session->next_sse(Clock::now()));
}

TEST_F(CompletionSessionTest, ARequestTheWorkerRefusesIsA400WithNothingLeftInFlight) {
  // The prompt and max_tokens together pass the context: the worker's check, not the parser's.
  try {
    start(R"({"model": "tiny", "prompt": "Once upon", "max_tokens": )" +
          std::to_string(w_.tiny().context_length) + "}");
    ADD_FAILURE() << "the worker took a request past its context";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
  }
  EXPECT_EQ(worker()->in_flight(), 0u);
}

TEST_F(CompletionSessionTest, CancelStopsTheChoiceInTheWorker) {
  auto session = start(
      R"({"model": "tiny", "prompt": "Once upon", "max_tokens": 400, "ignore_eos": true, "n": 2,
          "temperature": 1.0, "seed": 3})");
  session->cancel();
  session->cancel();  // idempotent
  // The worker ends both choices as cancelled: neither reaches its token budget ("length").
  const json r = session->wait_response(Clock::now() + std::chrono::seconds(120));
  for (const json& c : r["choices"]) EXPECT_TRUE(c["finish_reason"].is_null()) << r.dump();
  EXPECT_EQ(worker()->in_flight(), 0u);
}

TEST_F(CompletionSessionTest, ADeadlineIsA504AndCancelsTheChoices) {
  auto session =
      start(R"({"model": "tiny", "prompt": "Once upon", "max_tokens": 400, "ignore_eos": true})");
  try {
    session->wait_response(Clock::now());
    ADD_FAILURE() << "400 tokens came back at once";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 504) << e.what();
  }
  const auto connection = worker();
  // Stopped by the cancel, not run out: the worker counts it aborted short of its 400 tokens,
  // and the gateway's metrics count an abort, not a success.
  json stats;
  EXPECT_TRUE(test::eventually([&] {
    stats = connection->call("stats");
    return stats["finished"] == 1;
  })) << stats.dump();
  EXPECT_EQ(stats["aborted"], 1) << stats.dump();
  EXPECT_LT(stats["generated_tokens"].get<int>(), 400) << stats.dump();
  EXPECT_TRUE(test::eventually([&] {
    return metrics_.render().find(R"(finished_reason="abort")") != std::string::npos;
  })) << metrics_.render();
}

}  // namespace
}  // namespace hearth::gateway
