// The JSONL event schema: what the writer emits, that the reader gets it back, and that the
// reader refuses what is not an event with a message saying why.
#include <gtest/gtest.h>

#include <cmath>

#include "worker/engine/event_json.h"
#include "worker/engine/logprobs.h"
#include "worker/engine/sampler.h"

namespace hearth {
namespace {

using json = nlohmann::json;

TEST(EventJson, HeldBackTextIsWrittenAsVisible) {
  TokenOutput t;
  t.token = 5;
  t.text = "ab";
  t.visible = "a";  // "b" may start a stop string
  EXPECT_EQ(token_event_json("r", t)["visible"], "a");
  FinishOutput f;
  f.final_visible = "b";
  EXPECT_EQ(done_event_json("r", f)["visible"], "b");
  EXPECT_FALSE(done_event_json("r", FinishOutput{}).contains("visible"));
}

TEST(EventJson, TokenEventsRoundTrip) {
  TokenOutput t;
  t.token = 42;
  t.logprob = -0.25f;
  t.text = "h\xc3\xa9";
  t.visible = t.text;  // no stop string holds anything back: no "visible" field
  t.top_logprobs = {{42, -0.25f}, {7, -1.5f}};
  const json j = token_event_json("r1", t);
  EXPECT_EQ(
      event_line(j),
      "{\"id\":\"r1\",\"logprob\":-0.25,\"text\":\"h\xc3\xa9\",\"token\":42,"
      "\"top_logprobs\":[{\"logprob\":-0.25,\"token\":42},{\"logprob\":-1.5,\"token\":7}]}\n");
  const Event e = parse_event_line(event_line(j));
  EXPECT_FALSE(e.done);
  EXPECT_EQ(e.id, "r1");
  EXPECT_EQ(e.token.token, 42);
  EXPECT_EQ(e.token.logprob, -0.25);
  EXPECT_EQ(e.token.text, t.text);
  EXPECT_EQ(e.token.top_logprobs, t.top_logprobs);
}

TEST(EventJson, AnEmptyIdAndNoTopLogprobsLeaveTheFieldsOut) {
  TokenOutput t;
  t.token = 3;
  t.logprob = NAN;  // JSON has no NaN: null
  const json j = token_event_json("", t);
  EXPECT_EQ(event_line(j), "{\"logprob\":null,\"text\":\"\",\"token\":3}\n");
  EXPECT_TRUE(std::isnan(event_from_json(j).token.logprob));
}

TEST(EventJson, FinalEventsRoundTrip) {
  FinishOutput f;
  f.reason = FinishReason::Error;
  f.error = "the cpu backend failed: boom";
  f.prompt_tokens = 4;
  f.generated_tokens = 3;
  f.timings.decode_ms = 10;
  const json j = done_event_json("r2", f, {{"load_ms", 5.0}});
  EXPECT_EQ(j["stop"], "error");
  EXPECT_EQ(j["cached_tokens"], 0);
  EXPECT_EQ(j["timings"]["load_ms"], 5.0);
  EXPECT_EQ(j["timings"]["decode_tokens_per_s"], 200.0);  // 2 tokens after the first in 10 ms
  const Event e = event_from_json(j);
  EXPECT_TRUE(e.done);
  EXPECT_EQ(e.id, "r2");
  EXPECT_EQ(e.summary.stop, "error");
  EXPECT_EQ(e.summary.error, f.error);
  EXPECT_EQ(e.summary.prompt_tokens, 4);
  EXPECT_EQ(e.summary.generated_tokens, 3);
  EXPECT_EQ(e.summary.timings["load_ms"], 5.0);

  f.reason = FinishReason::Cancelled;
  EXPECT_FALSE(done_event_json("", f).contains("error"));
  EXPECT_FALSE(done_event_json("", f).contains("id"));
  EXPECT_EQ(done_event_json("", f)["stop"], "cancelled");
}

TEST(EventJson, ReadsOlderStreams) {
  const Event t = parse_event_line(R"({"token":5,"logprob":-1})");
  EXPECT_EQ(t.token.text, "");
  EXPECT_EQ(t.id, "");
  const Event d = parse_event_line(R"({"done":true,"stop":"eos","generated_tokens":0})");
  EXPECT_EQ(d.summary.prompt_tokens, 0);
  EXPECT_EQ(d.summary.cached_tokens, 0);
}

TEST(EventJson, RefusesWhatIsNotAnEvent) {
  const std::pair<const char*, const char*> cases[] = {
      {"[1]", "not a JSON object"},
      {"nope", "not a JSON object"},
      {R"({"text":"a"})", "token event without an integer \"token\""},
      {R"({"token":1,"logprob":"x"})", "\"logprob\" must be a number"},
      {R"({"token":1,"text":3})", "\"text\" must be a string"},
      {R"({"id":7,"token":1})", "\"id\" must be a string"},
      {R"({"token":1,"top_logprobs":{}})", "\"top_logprobs\" must be an array"},
      {R"({"token":1,"top_logprobs":[{"logprob":0}]})", "need an integer \"token\""},
      {R"({"done":false})", "\"done\" must be true"},
      {R"({"done":true,"generated_tokens":0})", "summary without \"stop\""},
      {R"({"done":true,"stop":"eos"})", "summary without \"generated_tokens\""},
      {R"({"done":true,"stop":"eos","generated_tokens":0,"prompt_tokens":"2"})",
       "\"prompt_tokens\" must be an integer"},
  };
  for (const auto& [line, message] : cases) {
    try {
      parse_event_line(line);
      ADD_FAILURE() << "accepted " << line;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << line << ": " << e.what();
    }
  }
}

TEST(TopLogprobs, AreTheLargestLogitsWithTheSampledTokensLogprob) {
  std::vector<float> logits(1000);
  uint32_t x = 12345;
  for (float& l : logits) {
    x = x * 1664525u + 1013904223u;
    l = float(x >> 8) / float(1 << 24) * 8.0f - 4.0f;
  }
  logits[10] = logits[20] = 9.0f;  // a tie: the lower id first
  const std::vector<TokenLogprob> top = top_logprobs(logits, 5);
  ASSERT_EQ(top.size(), 5u);
  EXPECT_EQ(top[0].token, 10);
  EXPECT_EQ(top[1].token, 20);
  for (size_t i = 0; i < top.size(); ++i) {
    EXPECT_EQ(top[i].logprob, token_logprob(logits, top[i].token));  // bit-identical
    if (i > 0) {
      EXPECT_LE(top[i].logprob, top[i - 1].logprob);
    }
  }
  for (size_t t = 0; t < logits.size(); ++t)
    if (logits[t] > logits[top[4].token]) {
      bool listed = false;
      for (const TokenLogprob& c : top) listed |= c.token == int32_t(t);
      EXPECT_TRUE(listed) << t;
    }
  EXPECT_EQ(top_logprobs(logits, 0).size(), 0u);
  EXPECT_EQ(top_logprobs(std::span(logits).first(3), 5).size(), 3u);
}

}  // namespace
}  // namespace hearth
