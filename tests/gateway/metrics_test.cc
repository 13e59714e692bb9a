// The gateway's metrics without HTTP: what /metrics renders is valid exposition text with vLLM's
// names and types, a model's workers (one per profile) are summed, a scrape without traffic
// moves no counter, a restarted worker's counters add on, and an error is no "stop".

#include <gtest/gtest.h>

#include "gateway/endpoints/metrics.h"
#include "gateway/metrics.h"
#include "tests/gateway/prometheus_text.h"

namespace hearth::gateway {
namespace {

using test::PromText;

EngineSnapshot busy(int running, int64_t queries) {
  EngineSnapshot s;
  s.running = running;
  s.waiting = 1;
  s.kv_blocks_used = 8;
  s.kv_blocks_total = 32;
  s.kv_block_size = 16;
  s.prefix_queries = queries;
  s.prefix_hits = queries / 2;
  s.preemptions = 3;
  s.iteration_tokens.observe(1);
  s.iteration_tokens.observe(40);
  return s;
}

RequestRecord request(const std::string& reason) {
  RequestRecord r;
  r.model = "m";
  r.finish_reason = reason;
  r.prompt_tokens = 7;
  r.generation_tokens = 3;
  r.ttft_s = 0.01;
  r.e2e_s = 0.05;
  r.inter_token_s = {0.02, 0.02};
  r.choices = {{0.001, 0.004, 0.04}};
  return r;
}

TEST(Metrics, VllmNamesAndTypesInValidExpositionText) {
  Metrics metrics;
  metrics.record(request("stop"));
  metrics.set_engines({{"m", "", 1, busy(1, 100)}});
  metrics.set_workers(1, 0);
  const PromText text(metrics.render());
  const std::map<std::string, std::string> types = {
      {"hearth:num_requests_running", "gauge"},
      {"hearth:num_requests_waiting", "gauge"},
      {"hearth:kv_cache_usage_perc", "gauge"},
      {"hearth:cache_config_info", "gauge"},
      {"hearth:prefix_cache_queries_total", "counter"},
      {"hearth:prefix_cache_hits_total", "counter"},
      {"hearth:num_preemptions_total", "counter"},
      {"hearth:kv_share_hit_tokens_total", "counter"},
      {"hearth:kv_share_hit_blocks_total", "counter"},
      {"hearth:kv_share_published_blocks_total", "counter"},
      {"hearth:prompt_tokens_total", "counter"},
      {"hearth:generation_tokens_total", "counter"},
      {"hearth:request_success_total", "counter"},
      {"hearth:iteration_tokens_total", "histogram"},
      {"hearth:time_to_first_token_seconds", "histogram"},
      {"hearth:inter_token_latency_seconds", "histogram"},
      {"hearth:time_per_output_token_seconds", "histogram"},
      {"hearth:e2e_request_latency_seconds", "histogram"},
      {"hearth:request_queue_time_seconds", "histogram"},
      {"hearth:request_prefill_time_seconds", "histogram"},
      {"hearth:request_decode_time_seconds", "histogram"},
      {"hearth:request_inference_time_seconds", "histogram"},
      {"hearth:request_prompt_tokens", "histogram"},
      {"hearth:request_generation_tokens", "histogram"},
      {"hearth:workers_alive", "gauge"},
      {"hearth:worker_restarts_total", "counter"}};
  for (const auto& [name, type] : types) EXPECT_EQ(text.type(name), type) << name;
  EXPECT_EQ(text.value("hearth:cache_config_info",
                       {{"model_name", "m"}, {"block_size", "16"}, {"num_gpu_blocks", "32"}}),
            1);
  EXPECT_EQ(text.value("hearth:num_preemptions_total", {{"model_name", "m"}}), 3);
  EXPECT_EQ(text.value("hearth:iteration_tokens_total_count"), 2);
  EXPECT_EQ(text.value("hearth:iteration_tokens_total_sum"), 41);
  EXPECT_EQ(text.value("hearth:iteration_tokens_total_bucket", {{"le", "1"}}), 1);
  EXPECT_EQ(text.value("hearth:request_prompt_tokens_sum"), 7);
  EXPECT_EQ(text.value("hearth:request_generation_tokens_sum"), 3);
  EXPECT_EQ(text.value("hearth:time_per_output_token_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(text.value("hearth:request_decode_time_seconds_sum"), 0.04);
}

// Two profiles of one model: one series each, the sum of both workers (each once overwrote it).
TEST(Metrics, AModelsWorkersAreSummed) {
  Metrics metrics;
  metrics.set_engines({{"m", "", 1, busy(1, 100)}, {"m", "small", 1, busy(1, 50)}});
  const PromText text(metrics.render());
  EXPECT_EQ(text.value("hearth:num_requests_running", {{"model_name", "m"}}), 2);
  EXPECT_EQ(text.value("hearth:num_requests_waiting", {{"model_name", "m"}}), 2);
  EXPECT_DOUBLE_EQ(text.value("hearth:kv_cache_usage_perc", {{"model_name", "m"}}), 0.25);
  EXPECT_EQ(text.value("hearth:prefix_cache_queries_total", {{"model_name", "m"}}), 150);
  EXPECT_EQ(text.value("hearth:iteration_tokens_total_count"), 4);
  EXPECT_EQ(text.value("hearth:cache_config_info", {{"profile", "small"}}), 1);
  // No worker left: nothing runs (the counters keep what they counted).
  metrics.set_engines({});
  const PromText after(metrics.render());
  EXPECT_EQ(after.value("hearth:num_requests_running", {{"model_name", "m"}}), 0);
  EXPECT_EQ(after.value("hearth:prefix_cache_queries_total", {{"model_name", "m"}}), 150);
}

// The same reports again (no traffic): the rendering does not change, counters included. With
// two workers of one model this once grew at every scrape.
TEST(Metrics, AScrapeWithoutTrafficMovesNothing) {
  Metrics metrics;
  const std::vector<WorkerReport> reports = {{"m", "", 1, busy(1, 100)},
                                             {"m", "small", 1, busy(0, 50)}};
  metrics.set_engines(reports);
  metrics.set_workers(2, 1);
  const std::string first = metrics.render();
  metrics.set_engines(reports);
  metrics.set_workers(2, 1);
  EXPECT_EQ(metrics.render(), first);
}

// A worker started again counts from 0: its counts add to what the old one counted.
TEST(Metrics, ARestartedWorkersCountersAddOn) {
  Metrics metrics;
  metrics.set_engines({{"m", "", 1, busy(1, 100)}});
  metrics.set_engines({{"m", "", 2, busy(1, 30)}});
  metrics.set_workers(1, 1);
  const PromText text(metrics.render());
  EXPECT_EQ(text.value("hearth:prefix_cache_queries_total", {{"model_name", "m"}}), 130);
  EXPECT_EQ(text.value("hearth:num_preemptions_total", {{"model_name", "m"}}), 6);
  EXPECT_EQ(text.value("hearth:iteration_tokens_total_count"), 4);
  EXPECT_EQ(text.value("hearth:worker_restarts_total"), 1);
}

TEST(Metrics, FinishReasonsAreKeptApart) {
  Metrics metrics;
  for (const char* reason : {"stop", "length", "abort", "error", "error"})
    metrics.record(request(reason));
  const PromText text(metrics.render());
  auto count = [&](const char* reason) {
    return text.value("hearth:request_success_total", {{"finished_reason", reason}});
  };
  EXPECT_EQ(count("stop"), 1);
  EXPECT_EQ(count("length"), 1);
  EXPECT_EQ(count("abort"), 1);
  EXPECT_EQ(count("error"), 2);
}

// Issue 22 item 4: the prefix KV shared across workers, per model, summed over its workers and
// added on across a restart, as the other counters are; read from the workers' stats fields.
TEST(Metrics, KvSharingCountersAreSummedPerModel) {
  auto shared = [](int64_t tokens, int64_t blocks, int64_t published) {
    EngineSnapshot s;
    s.kv_share_hit_tokens = tokens;
    s.kv_share_hit_blocks = blocks;
    s.kv_share_published_blocks = published;
    return s;
  };
  Metrics metrics;
  metrics.set_engines({{"m", "", 1, shared(64, 4, 0)},
                       {"m", "small", 1, shared(0, 0, 5)},
                       {"other", "", 1, shared(16, 1, 2)}});
  metrics.set_engines({{"m", "", 2, shared(32, 2, 1)}, {"m", "small", 1, shared(0, 0, 5)}});
  const PromText text(metrics.render());
  const std::map<std::string, std::string> m = {{"model_name", "m"}},
                                           other = {{"model_name", "other"}};
  EXPECT_EQ(text.value("hearth:kv_share_hit_tokens_total", m), 96);
  EXPECT_EQ(text.value("hearth:kv_share_hit_blocks_total", m), 6);
  EXPECT_EQ(text.value("hearth:kv_share_published_blocks_total", m), 6);
  EXPECT_EQ(text.value("hearth:kv_share_hit_tokens_total", other), 16);
  EXPECT_EQ(text.value("hearth:kv_share_published_blocks_total", other), 2);

  const EngineSnapshot parsed = engine_snapshot(
      {{"kv_share_hit_tokens", 48}, {"kv_share_hit_blocks", 3}, {"kv_share_published_blocks", 7}});
  EXPECT_EQ(parsed.kv_share_hit_tokens, 48);
  EXPECT_EQ(parsed.kv_share_hit_blocks, 3);
  EXPECT_EQ(parsed.kv_share_published_blocks, 7);
  EXPECT_EQ(engine_snapshot(nlohmann::json::object()).kv_share_hit_tokens, 0);
}

// The reader itself refuses what is not the format.
TEST(PromText, RefusesWhatIsNotTheFormat) {
  EXPECT_THROW(PromText("x 1\n"), std::runtime_error);  // no family declared
  EXPECT_THROW(PromText("# TYPE x gauge\nx{a=\"1} 1\n"), std::runtime_error);
  EXPECT_THROW(PromText("# TYPE x gauge\nx one\n"), std::runtime_error);
  EXPECT_THROW(PromText("# TYPE x gauge\nx 1\nx 2\n"), std::runtime_error);
  EXPECT_THROW(PromText("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                        "h_count 1\nh_sum 1\n"),
               std::runtime_error);
  EXPECT_THROW(PromText("# TYPE 1x gauge\n"), std::runtime_error);          // a bad metric name
  EXPECT_THROW(PromText("# TYPE x gauges\n"), std::runtime_error);          // an unknown type
  EXPECT_THROW(PromText("# TYPE x gauge\nx  1\n"), std::runtime_error);     // no value
  EXPECT_THROW(PromText("# TYPE x gauge\nx 1 12a\n"), std::runtime_error);  // a bad timestamp
  EXPECT_THROW(PromText("# TYPE x gauge\nx{a:b=\"1\"} 1\n"), std::runtime_error);  // label name
  EXPECT_NO_THROW(PromText("# TYPE x gauge\nx 1 -1700000000\n"));
  EXPECT_NO_THROW(PromText("# HELP x a gauge\n# TYPE x gauge\nx{a=\"q\\\"\"} 1.5\n"));
}

}  // namespace
}  // namespace hearth::gateway
