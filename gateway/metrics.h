// The gateway's Prometheus metrics, named like vLLM's with a `hearth:` prefix and a
// `model_name` label, rendered in the text exposition format for GET /metrics. The registry
// and the format are prometheus-cpp's. A model served by several workers (one per engine
// profile) has one series per metric: its workers' values summed, as vLLM's dashboards read a
// model's series (a `profile` label would split every panel by a hearth-only dimension); only
// cache_config_info, which describes one worker's pool, names the profile. The list beside
// vLLM's is in gateway/README.md.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "worker/iteration_tokens.h"

namespace hearth::gateway {

// One engine sequence (a choice) as the worker timed it, from its last event.
struct ChoiceTimes {
  double queue_s = 0, prefill_s = 0, decode_s = 0;
};

// A finished request as the metrics see it.
struct RequestRecord {
  std::string model;
  std::string finish_reason;  // stop | length | abort | error
  int prompt_tokens = 0, generation_tokens = 0;
  double ttft_s = -1, e2e_s = 0;
  std::vector<double> inter_token_s;
  std::vector<ChoiceTimes> choices;  // those that finished (stop or length)
};

// What one worker reports: the stats it pushes with each events reply. Counters are the
// worker's own, since it started.
struct EngineSnapshot {
  int running = 0, waiting = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0, kv_block_size = 0;
  int64_t prefix_queries = 0, prefix_hits = 0;  // tokens
  int64_t preemptions = 0;
  // Prefix KV read from other workers' shared blocks (issue 22 item 4), and own blocks shared.
  int64_t kv_share_hit_tokens = 0, kv_share_hit_blocks = 0, kv_share_published_blocks = 0;
  IterationTokens iteration_tokens;
};

// One live worker at a scrape: which (model, profile) it serves and which process it is (the
// slot's generation: a new process restarts its counters at 0).
struct WorkerReport {
  std::string model, profile;
  int generation = 0;
  EngineSnapshot snapshot;
};

class Metrics {
 public:
  Metrics();
  ~Metrics();

  void record(const RequestRecord& record);
  // Every live worker with stats: the gauges become their sums per model (0 for a model with
  // none), the counters grow by what each worker counted since the last report of it.
  void set_engines(const std::vector<WorkerReport>& workers);
  void set_workers(int alive, int64_t restarts);

  // The text exposition format.
  std::string render() const;

 private:
  struct PerModel;
  PerModel& model(const std::string& name);
  using WorkerKey = std::tuple<std::string, std::string, int>;  // model, profile, generation

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& running_;
  prometheus::Family<prometheus::Gauge>& waiting_;
  prometheus::Family<prometheus::Gauge>& kv_usage_;
  prometheus::Family<prometheus::Gauge>& cache_config_;
  prometheus::Family<prometheus::Counter>& prefix_queries_;
  prometheus::Family<prometheus::Counter>& prefix_hits_;
  prometheus::Family<prometheus::Counter>& preemptions_;
  prometheus::Family<prometheus::Counter>& kv_share_hit_tokens_;
  prometheus::Family<prometheus::Counter>& kv_share_hit_blocks_;
  prometheus::Family<prometheus::Counter>& kv_share_published_blocks_;
  prometheus::Family<prometheus::Counter>& prompt_tokens_;
  prometheus::Family<prometheus::Counter>& generation_tokens_;
  prometheus::Family<prometheus::Counter>& success_;
  prometheus::Family<prometheus::Histogram>& iteration_tokens_;
  prometheus::Family<prometheus::Histogram>& ttft_;
  prometheus::Family<prometheus::Histogram>& itl_;
  prometheus::Family<prometheus::Histogram>& tpot_;
  prometheus::Family<prometheus::Histogram>& e2e_;
  prometheus::Family<prometheus::Histogram>& queue_;
  prometheus::Family<prometheus::Histogram>& prefill_;
  prometheus::Family<prometheus::Histogram>& decode_;
  prometheus::Family<prometheus::Histogram>& inference_;
  prometheus::Family<prometheus::Histogram>& request_prompt_tokens_;
  prometheus::Family<prometheus::Histogram>& request_generation_tokens_;
  prometheus::Gauge& workers_alive_;
  prometheus::Counter& worker_restarts_;

  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<PerModel>> models_;
  std::map<WorkerKey, EngineSnapshot> seen_;  // each worker's counters as last added
  int64_t seen_restarts_ = 0;
};

}  // namespace hearth::gateway
