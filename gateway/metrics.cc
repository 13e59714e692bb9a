#include "gateway/metrics.h"

#include <prometheus/text_serializer.h>

namespace hearth::gateway {

namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// vLLM's buckets, so dashboards built for it read these alike.
const Histogram::BucketBoundaries kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                                  0.1,   0.25,  0.5,  0.75, 1.0,  2.5,  5.0,
                                                  7.5,   10.0,  20.0, 40.0, 80.0, 160.0};
const Histogram::BucketBoundaries kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                 0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                 7.5,  10.0,  20.0, 40.0,  80.0};
const Histogram::BucketBoundaries kLatencyBuckets = {0.3,   0.5,   1.0,   2.5,   5.0,    10.0,
                                                     15.0,  20.0,  30.0,  40.0,  50.0,   60.0,
                                                     120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

}  // namespace

// Every series of one model, created on its first request.
struct Metrics::PerModel {
  prometheus::Gauge* running;
  prometheus::Gauge* waiting;
  prometheus::Gauge* kv_usage;
  prometheus::Counter* prefix_queries;
  prometheus::Counter* prefix_hits;
  prometheus::Counter* prompt_tokens;
  prometheus::Counter* generation_tokens;
  prometheus::Histogram* ttft;
  prometheus::Histogram* itl;
  prometheus::Histogram* e2e;
  prometheus::Histogram* queue;
  // Worker counters restart at 0 with the worker: the last values seen, to add the difference.
  int64_t seen_prefix_queries = 0, seen_prefix_hits = 0;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      running_(BuildGauge()
                   .Name("hearth:num_requests_running")
                   .Help("Requests in model execution batches.")
                   .Register(*registry_)),
      waiting_(BuildGauge()
                   .Name("hearth:num_requests_waiting")
                   .Help("Requests waiting to be processed.")
                   .Register(*registry_)),
      kv_usage_(BuildGauge()
                    .Name("hearth:kv_cache_usage_perc")
                    .Help("KV-cache usage. 1 means 100 percent usage.")
                    .Register(*registry_)),
      prefix_queries_(BuildCounter()
                          .Name("hearth:prefix_cache_queries_total")
                          .Help("Prefix cache queries, in tokens.")
                          .Register(*registry_)),
      prefix_hits_(BuildCounter()
                       .Name("hearth:prefix_cache_hits_total")
                       .Help("Prefix cache hits, in tokens.")
                       .Register(*registry_)),
      prompt_tokens_(BuildCounter()
                         .Name("hearth:prompt_tokens_total")
                         .Help("Prefill tokens processed.")
                         .Register(*registry_)),
      generation_tokens_(BuildCounter()
                             .Name("hearth:generation_tokens_total")
                             .Help("Generation tokens processed.")
                             .Register(*registry_)),
      success_(BuildCounter()
                   .Name("hearth:request_success_total")
                   .Help("Finished requests, by finish reason.")
                   .Register(*registry_)),
      ttft_(BuildHistogram()
                .Name("hearth:time_to_first_token_seconds")
                .Help("Time to first token in seconds.")
                .Register(*registry_)),
      itl_(BuildHistogram()
               .Name("hearth:inter_token_latency_seconds")
               .Help("Inter-token latency in seconds.")
               .Register(*registry_)),
      e2e_(BuildHistogram()
               .Name("hearth:e2e_request_latency_seconds")
               .Help("End-to-end request latency in seconds.")
               .Register(*registry_)),
      queue_(BuildHistogram()
                 .Name("hearth:request_queue_time_seconds")
                 .Help("Time spent before the worker accepted the request, in seconds.")
                 .Register(*registry_)),
      workers_alive_(BuildGauge()
                         .Name("hearth:workers_alive")
                         .Help("Batching worker processes running.")
                         .Register(*registry_)
                         .Add({})),
      worker_restarts_(BuildGauge()
                           .Name("hearth:worker_restarts")
                           .Help("Worker processes started again after one exited or died.")
                           .Register(*registry_)
                           .Add({})) {}

Metrics::~Metrics() = default;

Metrics::PerModel& Metrics::model(const std::string& name) {
  std::unique_ptr<PerModel>& m = models_[name];
  if (!m) {
    const prometheus::Labels labels = {{"model_name", name}};
    m = std::make_unique<PerModel>();
    m->running = &running_.Add(labels);
    m->waiting = &waiting_.Add(labels);
    m->kv_usage = &kv_usage_.Add(labels);
    m->prefix_queries = &prefix_queries_.Add(labels);
    m->prefix_hits = &prefix_hits_.Add(labels);
    m->prompt_tokens = &prompt_tokens_.Add(labels);
    m->generation_tokens = &generation_tokens_.Add(labels);
    m->ttft = &ttft_.Add(labels, kTtftBuckets);
    m->itl = &itl_.Add(labels, kItlBuckets);
    m->e2e = &e2e_.Add(labels, kLatencyBuckets);
    m->queue = &queue_.Add(labels, kLatencyBuckets);
  }
  return *m;
}

void Metrics::record(const RequestRecord& r) {
  std::lock_guard lock(mutex_);
  PerModel& m = model(r.model);
  m.prompt_tokens->Increment(r.prompt_tokens);
  m.generation_tokens->Increment(r.generation_tokens);
  success_.Add({{"model_name", r.model}, {"finished_reason", r.finish_reason}}).Increment();
  if (r.ttft_s >= 0) m.ttft->Observe(r.ttft_s);
  for (double s : r.inter_token_s) m.itl->Observe(s);
  m.e2e->Observe(r.e2e_s);
  m.queue->Observe(r.queue_s);
}

void Metrics::set_engine(const std::string& name, const EngineSnapshot& s) {
  std::lock_guard lock(mutex_);
  PerModel& m = model(name);
  m.running->Set(s.running);
  m.waiting->Set(s.waiting);
  m.kv_usage->Set(s.kv_usage);
  auto add_since = [](prometheus::Counter* c, int64_t now, int64_t& seen) {
    c->Increment(double(now >= seen ? now - seen : now));  // a smaller value: a new worker
    seen = now;
  };
  add_since(m.prefix_queries, s.prefix_queries, m.seen_prefix_queries);
  add_since(m.prefix_hits, s.prefix_hits, m.seen_prefix_hits);
}

void Metrics::set_workers(int alive, int64_t restarts) {
  std::lock_guard lock(mutex_);
  workers_alive_.Set(alive);
  worker_restarts_.Set(double(restarts));
}

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace hearth::gateway
