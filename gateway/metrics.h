// The gateway's Prometheus metrics, named like vLLM's with a `hearth:` prefix and a
// `model_name` label, rendered in the text exposition format for GET /metrics. The registry
// and the format are prometheus-cpp's.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace hearth::gateway {

// A finished request as the metrics see it.
struct RequestRecord {
  std::string model;
  std::string finish_reason;  // stop | length | abort | error
  int prompt_tokens = 0, generation_tokens = 0;
  double queue_s = 0, ttft_s = -1, e2e_s = 0;
  std::vector<double> inter_token_s;
};

// What the workers of one model report: the stats they push with each events reply.
struct EngineSnapshot {
  int running = 0, waiting = 0;
  double kv_usage = 0;                          // 0..1
  int64_t prefix_queries = 0, prefix_hits = 0;  // tokens, since the worker started
};

class Metrics {
 public:
  Metrics();
  ~Metrics();

  void record(const RequestRecord& record);
  void set_engine(const std::string& model, const EngineSnapshot& snapshot);
  void set_workers(int alive, int64_t restarts);

  // The text exposition format.
  std::string render() const;

 private:
  struct PerModel;
  PerModel& model(const std::string& name);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& running_;
  prometheus::Family<prometheus::Gauge>& waiting_;
  prometheus::Family<prometheus::Gauge>& kv_usage_;
  prometheus::Family<prometheus::Counter>& prefix_queries_;
  prometheus::Family<prometheus::Counter>& prefix_hits_;
  prometheus::Family<prometheus::Counter>& prompt_tokens_;
  prometheus::Family<prometheus::Counter>& generation_tokens_;
  prometheus::Family<prometheus::Counter>& success_;
  prometheus::Family<prometheus::Histogram>& ttft_;
  prometheus::Family<prometheus::Histogram>& itl_;
  prometheus::Family<prometheus::Histogram>& e2e_;
  prometheus::Family<prometheus::Histogram>& queue_;
  prometheus::Gauge& workers_alive_;
  prometheus::Gauge& worker_restarts_;

  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<PerModel>> models_;
};

}  // namespace hearth::gateway
