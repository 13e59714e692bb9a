// What a request came to when an engine ran a batch of them to the end (tokens, their logprobs,
// the finish reason), and the bitwise comparison the GPU engine tests make between two runs
// (alone vs batched, chunked vs whole, graphs vs eager).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "worker/engine/backend.h"
#include "worker/engine/engine.h"

namespace hearth::test {

struct EngineOutcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason reason = FinishReason::Error;
  int preemptions = 0;
};

// Runs `requests` on one engine until every one finished; expects no error and every KV block
// back in the pool at the end.
inline std::map<std::string, EngineOutcome> run_engine(Backend& backend, const EngineOptions& o,
                                                       const std::vector<Request>& requests) {
  Engine engine(backend, o, nullptr, {});
  for (const Request& r : requests) engine.submit(r);
  std::map<std::string, EngineOutcome> out;
  while (engine.has_work()) {
    for (const RequestOutput& step : engine.step()) {
      EngineOutcome& r = out[step.id];
      for (const TokenOutput& t : step.tokens) {
        r.tokens.push_back(t.token);
        r.logprobs.push_back(t.logprob);
      }
      if (step.finish) {
        r.reason = step.finish->reason;
        r.preemptions = step.finish->preemptions;
        EXPECT_NE(r.reason, FinishReason::Error) << step.id << ": " << step.finish->error;
      }
    }
  }
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);  // every block back in the pool
  return out;
}

// For a backend whose model makes every logit NaN: a greedy and a sampled request in one step
// each end at their first token with an error that names the cause (not a token id from the
// sampler's search, nor a crash), no token gets out, and every block comes back.
inline void expect_non_finite_logits_end_the_requests(Backend& backend,
                                                      const EngineOptions& options = {}) {
  Engine engine(backend, options, nullptr, {});
  for (const float temperature : {0.0f, 0.8f}) {
    Request r;
    r.id = temperature == 0.0f ? "greedy" : "sampled";
    r.prompt = {1, 2, 3, 4};
    r.settings.max_tokens = 4;
    r.settings.ignore_eos = true;
    r.settings.sampling.temperature = temperature;
    engine.submit(r);
  }
  std::map<std::string, RequestOutput> finished;
  while (engine.has_work())
    for (RequestOutput& out : engine.step()) {
      EXPECT_TRUE(out.tokens.empty()) << out.id;
      if (out.finish) finished[out.id] = std::move(out);
    }
  ASSERT_EQ(finished.size(), 2u);
  for (const auto& [id, out] : finished) {
    EXPECT_EQ(out.finish->reason, FinishReason::Error) << id;
    EXPECT_NE(out.finish->error.find("not finite"), std::string::npos)
        << id << ": " << out.finish->error;
  }
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

// Tokens, reasons and the logprobs' bits equal, request by request.
inline void expect_same_outcomes(const std::map<std::string, EngineOutcome>& got,
                                 const std::map<std::string, EngineOutcome>& want,
                                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [id, w] : want) {
    const EngineOutcome& g = got.at(id);
    EXPECT_EQ(g.tokens, w.tokens) << what << " " << id;
    ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << what << " " << id;
    EXPECT_EQ(0, std::memcmp(g.logprobs.data(), w.logprobs.data(), w.logprobs.size() * 4))
        << what << " " << id << ": logprobs differ in their bits";
    EXPECT_EQ(g.reason, w.reason) << what << " " << id;
  }
}

// Each of `requests` alone on `backend`, one engine after another: what batched runs are held
// to.
inline std::map<std::string, EngineOutcome> run_each_alone(Backend& backend, const EngineOptions& o,
                                                           const std::vector<Request>& requests) {
  std::map<std::string, EngineOutcome> out;
  for (const Request& r : requests) out.merge(run_engine(backend, o, {r}));
  return out;
}

// For each n of `sizes`, the last n of `requests` run together on `backend` (different
// positions per n) give each request the outcome it had alone (`alone`, by id).
inline void expect_together_equals_alone(Backend& backend, const EngineOptions& o,
                                         const std::vector<Request>& requests,
                                         const std::map<std::string, EngineOutcome>& alone,
                                         std::initializer_list<int> sizes) {
  for (int n : sizes) {
    const std::vector<Request> some(requests.end() - n, requests.end());
    std::map<std::string, EngineOutcome> want;
    for (const Request& r : some) want[r.id] = alone.at(r.id);
    expect_same_outcomes(run_engine(backend, o, some), want, std::to_string(n) + " together");
  }
}

}  // namespace hearth::test
