// Reading a worker's jsonl stream back, and refusing anything that is not a complete one.
#include <gtest/gtest.h>

#include <cmath>

#include "proof/worker_output.h"

namespace hearth::proof {
namespace {

const char* kDone =
    R"({"done":true,"stop":"length","prompt_tokens":4,"generated_tokens":2,"timings":{"ttft_ms":1.5}})";

TEST(WorkerOutput, ReadsTokensAndTheSummary) {
  const std::string stream = std::string(R"({"token":5,"text":"he","logprob":-0.25})") + "\n" +
                             R"({"token":6,"text":"llo","logprob":null})" + "\n" + kDone + "\n";
  const Generation g = parse_worker_output(stream);
  EXPECT_EQ(g.tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(g.logprobs[0], -0.25);
  EXPECT_TRUE(std::isnan(g.logprobs[1]));
  EXPECT_EQ(g.streamed_text(), "hello");
  EXPECT_EQ(g.stop, "length");
  EXPECT_EQ(g.prompt_tokens, 4);
  EXPECT_EQ(g.timings["ttft_ms"], 1.5);
}

TEST(WorkerOutput, AcceptsAnEmptyGeneration) {
  const Generation g = parse_worker_output(
      R"({"done":true,"stop":"eos","prompt_tokens":3,"generated_tokens":0,"timings":{}})"
      "\n");
  EXPECT_TRUE(g.tokens.empty());
  EXPECT_EQ(g.stop, "eos");
}

void expect_refused(const std::string& stream, const std::string& message) {
  try {
    parse_worker_output(stream);
    ADD_FAILURE() << "accepted: " << stream;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(WorkerOutput, RefusesIncompleteOrMalformedStreams) {
  const std::string token = R"({"token":5,"text":"a","logprob":-1})";
  expect_refused("", "no final summary after 0 tokens");
  expect_refused(token + "\n", "no final summary after 1 tokens");
  expect_refused(token + "\n" + R"({"token":6,"te)", "ends in the middle of line 2");
  expect_refused("not json\n", "line 1: not a JSON object");
  expect_refused(R"({"text":"a"})"
                 "\n",
                 "line 1: token event without an integer \"token\"");
  expect_refused(R"({"token":1,"logprob":"x"})"
                 "\n",
                 "\"logprob\" must be a number");
  expect_refused(token + "\n" + kDone + "\n", "summary says 2 tokens, the stream has 1");
  expect_refused(token + "\n" + token + "\n" + kDone + "\n" + token + "\n",
                 "line 4: output after the final summary");
  expect_refused(R"({"done":true,"generated_tokens":0})"
                 "\n",
                 "summary without \"stop\"");
}

TEST(WorkerOutput, ReadsTheNewFieldsOfTheSchema) {
  const Generation g = parse_worker_output(
      R"({"id":"a","done":true,"stop":"error","error":"boom","prompt_tokens":2,)"
      R"("generated_tokens":0,"cached_tokens":1})"
      "\n");
  EXPECT_EQ(g.stop, "error");
  EXPECT_EQ(g.error, "boom");
  EXPECT_EQ(g.cached_tokens, 1);
}

TEST(WorkerOutput, SplitsABatchedStreamByRequest) {
  const std::string stream = std::string(R"({"id":"a","token":1,"text":"x","logprob":-1})") + "\n" +
                             R"({"id":"b","token":2,"text":"y","logprob":-2})" + "\n" +
                             R"({"id":"b","done":true,"stop":"eos","generated_tokens":1})" + "\n" +
                             R"({"id":"a","token":3,"text":"z","logprob":-3})" + "\n" +
                             R"({"id":"a","done":true,"stop":"length","generated_tokens":2})" +
                             "\n";
  const auto runs = parse_batched_worker_output(stream);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].first, "b");
  EXPECT_EQ(runs[0].second.tokens, (std::vector<int32_t>{2}));
  EXPECT_EQ(runs[1].first, "a");
  EXPECT_EQ(runs[1].second.tokens, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(runs[1].second.streamed_text(), "xz");
  EXPECT_EQ(runs[1].second.stop, "length");

  auto refused = [](const std::string& s, const std::string& message) {
    try {
      parse_batched_worker_output(s);
      ADD_FAILURE() << "accepted: " << s;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  refused(R"({"token":1})"
          "\n",
          "line 1: an event without an \"id\"");
  refused(R"({"id":"a","token":1})"
          "\n",
          "no final summary for request 'a'");
  refused(R"({"id":"a","done":true,"stop":"eos","generated_tokens":0})"
          "\n"
          R"({"id":"a","token":1})"
          "\n",
          "line 2: output for request 'a' after its final summary");
}

TEST(WorkerOutput, CutsABatchedStreamIntoRequestsAsFarAsItCanBeRead) {
  const std::string b_token = std::string(R"({"id":"b","token":2,"logprob":-2})") + "\n";
  const std::string b_done =
      std::string(R"({"id":"b","done":true,"stop":"eos","generated_tokens":1})") + "\n";
  const std::string a_token = std::string(R"({"id":"a","token":1,"logprob":-1})") + "\n";
  // Whole: each request's lines, in order, and which finished.
  BatchedStream whole = split_batched_worker_output(a_token + b_token + "\n" + b_done);
  EXPECT_EQ(whole.error, "");
  EXPECT_EQ(whole.events["b"], b_token + b_done);
  EXPECT_EQ(whole.events["a"], a_token);
  EXPECT_EQ(whole.finished, (std::set<std::string>{"b"}));
  EXPECT_EQ(parse_worker_output(whole.events["b"]).tokens, (std::vector<int32_t>{2}));

  // A worker that died mid-line or wrote garbage: what came before is kept, nothing after.
  BatchedStream cut = split_batched_worker_output(b_token + b_done + R"({"id":"a","tok)");
  EXPECT_EQ(cut.error, "worker output line 3: cut off (the worker stopped in the middle of it)");
  EXPECT_EQ(cut.finished, (std::set<std::string>{"b"}));
  BatchedStream garbage =
      split_batched_worker_output(b_token + "Segmentation fault\n" + b_done + a_token);
  EXPECT_NE(garbage.error.find("worker output line 2: "), std::string::npos) << garbage.error;
  EXPECT_TRUE(garbage.finished.empty());
  EXPECT_FALSE(garbage.events.contains("a"));
  EXPECT_EQ(split_batched_worker_output(b_done + b_token).error,
            "worker output line 2: output for request 'b' after its final summary");
  EXPECT_EQ(split_batched_worker_output(R"({"token":1})"
                                        "\n")
                .error,
            "worker output line 1: an event without an \"id\" in a batched stream");
}

}  // namespace
}  // namespace hearth::proof
