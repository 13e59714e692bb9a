#include "gateway/metrics.h"

#include <algorithm>
#include <type_traits>

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

// 1, 2, 5, 10, ... up to a million tokens: vLLM's 1-2-5 buckets for request token counts.
Histogram::BucketBoundaries token_count_buckets() {
  Histogram::BucketBoundaries b;
  for (double scale = 1; scale <= 1e6; scale *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (m * scale <= 1e6) b.push_back(m * scale);
  return b;
}

Histogram::BucketBoundaries iteration_token_buckets() {
  return {kIterationTokenBuckets.begin(), kIterationTokenBuckets.end()};
}

}  // namespace

// Every series of one model, created on its first request or worker report.
struct Metrics::PerModel {
  prometheus::Gauge* running;
  prometheus::Gauge* waiting;
  prometheus::Gauge* kv_usage;
  prometheus::Counter* prefix_queries;
  prometheus::Counter* prefix_hits;
  prometheus::Counter* preemptions;
  prometheus::Counter* kv_share_hit_tokens;
  prometheus::Counter* kv_share_hit_blocks;
  prometheus::Counter* kv_share_published_blocks;
  prometheus::Counter* prompt_tokens;
  prometheus::Counter* generation_tokens;
  prometheus::Histogram* iteration_tokens;
  prometheus::Histogram* ttft;
  prometheus::Histogram* itl;
  prometheus::Histogram* tpot;
  prometheus::Histogram* e2e;
  prometheus::Histogram* queue;
  prometheus::Histogram* prefill;
  prometheus::Histogram* decode;
  prometheus::Histogram* inference;
  prometheus::Histogram* request_prompt_tokens;
  prometheus::Histogram* request_generation_tokens;
  // cache_config_info, one per profile: its current labels' series.
  std::map<std::string, prometheus::Gauge*> cache_config;
};

namespace {

template <typename T>
prometheus::Family<T>& family(prometheus::Registry& registry, const char* name, const char* help) {
  if constexpr (std::is_same_v<T, prometheus::Counter>)
    return BuildCounter().Name(name).Help(help).Register(registry);
  else if constexpr (std::is_same_v<T, prometheus::Gauge>)
    return BuildGauge().Name(name).Help(help).Register(registry);
  else
    return BuildHistogram().Name(name).Help(help).Register(registry);
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      running_(family<prometheus::Gauge>(*registry_, "hearth:num_requests_running",
                                         "Requests in model execution batches.")),
      waiting_(family<prometheus::Gauge>(*registry_, "hearth:num_requests_waiting",
                                         "Requests waiting to be processed.")),
      kv_usage_(family<prometheus::Gauge>(*registry_, "hearth:kv_cache_usage_perc",
                                          "KV-cache usage. 1 means 100 percent usage.")),
      cache_config_(family<prometheus::Gauge>(
          *registry_, "hearth:cache_config_info",
          "Information of the KV cache of each worker (model and profile); the value is 1.")),
      prefix_queries_(family<prometheus::Counter>(*registry_, "hearth:prefix_cache_queries_total",
                                                  "Prefix cache queries, in tokens.")),
      prefix_hits_(family<prometheus::Counter>(*registry_, "hearth:prefix_cache_hits_total",
                                               "Prefix cache hits, in tokens.")),
      preemptions_(family<prometheus::Counter>(*registry_, "hearth:num_preemptions_total",
                                               "Cumulative number of preemptions.")),
      kv_share_hit_tokens_(family<prometheus::Counter>(
          *registry_, "hearth:kv_share_hit_tokens_total",
          "Prompt tokens whose KV was read from blocks another worker computed.")),
      kv_share_hit_blocks_(
          family<prometheus::Counter>(*registry_, "hearth:kv_share_hit_blocks_total",
                                      "KV blocks found among those other workers shared.")),
      kv_share_published_blocks_(
          family<prometheus::Counter>(*registry_, "hearth:kv_share_published_blocks_total",
                                      "Own full KV blocks shared with other workers.")),
      prompt_tokens_(family<prometheus::Counter>(*registry_, "hearth:prompt_tokens_total",
                                                 "Prefill tokens processed.")),
      generation_tokens_(family<prometheus::Counter>(*registry_, "hearth:generation_tokens_total",
                                                     "Generation tokens processed.")),
      success_(family<prometheus::Counter>(
          *registry_, "hearth:request_success_total",
          "Finished requests, by finish reason (stop, length, abort, error).")),
      iteration_tokens_(
          family<prometheus::Histogram>(*registry_, "hearth:iteration_tokens_total",
                                        "Histogram of the tokens of each engine step.")),
      ttft_(family<prometheus::Histogram>(*registry_, "hearth:time_to_first_token_seconds",
                                          "Time to first token in seconds.")),
      itl_(family<prometheus::Histogram>(*registry_, "hearth:inter_token_latency_seconds",
                                         "Inter-token latency in seconds.")),
      tpot_(family<prometheus::Histogram>(
          *registry_, "hearth:time_per_output_token_seconds",
          "Time per output token in seconds (each gap between tokens, as vLLM's).")),
      e2e_(family<prometheus::Histogram>(*registry_, "hearth:e2e_request_latency_seconds",
                                         "End-to-end request latency in seconds.")),
      queue_(family<prometheus::Histogram>(*registry_, "hearth:request_queue_time_seconds",
                                           "Time a sequence waited in the worker before it was "
                                           "first scheduled, in seconds.")),
      prefill_(family<prometheus::Histogram>(*registry_, "hearth:request_prefill_time_seconds",
                                             "Time a sequence spent computing its prompt, in "
                                             "seconds.")),
      decode_(family<prometheus::Histogram>(*registry_, "hearth:request_decode_time_seconds",
                                            "Time a sequence spent generating after its first "
                                            "token, in seconds.")),
      inference_(family<prometheus::Histogram>(*registry_, "hearth:request_inference_time_seconds",
                                               "Prefill plus decode time of a sequence, in "
                                               "seconds.")),
      request_prompt_tokens_(family<prometheus::Histogram>(
          *registry_, "hearth:request_prompt_tokens", "Number of prefill tokens processed.")),
      request_generation_tokens_(
          family<prometheus::Histogram>(*registry_, "hearth:request_generation_tokens",
                                        "Number of generation tokens processed.")),
      workers_alive_(family<prometheus::Gauge>(*registry_, "hearth:workers_alive",
                                               "Batching worker processes running.")
                         .Add({})),
      worker_restarts_(
          family<prometheus::Counter>(*registry_, "hearth:worker_restarts_total",
                                      "Worker processes started again after one exited or died.")
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
    m->preemptions = &preemptions_.Add(labels);
    m->kv_share_hit_tokens = &kv_share_hit_tokens_.Add(labels);
    m->kv_share_hit_blocks = &kv_share_hit_blocks_.Add(labels);
    m->kv_share_published_blocks = &kv_share_published_blocks_.Add(labels);
    m->prompt_tokens = &prompt_tokens_.Add(labels);
    m->generation_tokens = &generation_tokens_.Add(labels);
    m->iteration_tokens = &iteration_tokens_.Add(labels, iteration_token_buckets());
    m->ttft = &ttft_.Add(labels, kTtftBuckets);
    m->itl = &itl_.Add(labels, kItlBuckets);
    m->tpot = &tpot_.Add(labels, kItlBuckets);
    m->e2e = &e2e_.Add(labels, kLatencyBuckets);
    m->queue = &queue_.Add(labels, kLatencyBuckets);
    m->prefill = &prefill_.Add(labels, kLatencyBuckets);
    m->decode = &decode_.Add(labels, kLatencyBuckets);
    m->inference = &inference_.Add(labels, kLatencyBuckets);
    m->request_prompt_tokens = &request_prompt_tokens_.Add(labels, token_count_buckets());
    m->request_generation_tokens = &request_generation_tokens_.Add(labels, token_count_buckets());
  }
  return *m;
}

void Metrics::record(const RequestRecord& r) {
  std::lock_guard lock(mutex_);
  PerModel& m = model(r.model);
  m.prompt_tokens->Increment(r.prompt_tokens);
  m.generation_tokens->Increment(r.generation_tokens);
  m.request_prompt_tokens->Observe(r.prompt_tokens);
  m.request_generation_tokens->Observe(r.generation_tokens);
  success_.Add({{"model_name", r.model}, {"finished_reason", r.finish_reason}}).Increment();
  if (r.ttft_s >= 0) m.ttft->Observe(r.ttft_s);
  for (double s : r.inter_token_s) {
    m.itl->Observe(s);
    m.tpot->Observe(s);
  }
  m.e2e->Observe(r.e2e_s);
  for (const ChoiceTimes& c : r.choices) {
    m.queue->Observe(c.queue_s);
    m.prefill->Observe(c.prefill_s);
    m.decode->Observe(c.decode_s);
    m.inference->Observe(c.prefill_s + c.decode_s);
  }
}

void Metrics::set_engines(const std::vector<WorkerReport>& workers) {
  std::lock_guard lock(mutex_);
  struct Sum {
    int running = 0, waiting = 0;
    int64_t kv_used = 0, kv_total = 0;
  };
  std::map<std::string, Sum> sums;
  for (const auto& [name, m] : models_) sums[name];  // a model with no live worker reads 0
  for (const WorkerReport& w : workers) {
    const EngineSnapshot& now = w.snapshot;
    PerModel& m = model(w.model);
    Sum& sum = sums[w.model];
    sum.running += now.running;
    sum.waiting += now.waiting;
    sum.kv_used += now.kv_blocks_used;
    sum.kv_total += now.kv_blocks_total;
    // Counters grow by what this worker counted since it was last seen (a new process is a new
    // key, starting from 0), so a scrape without traffic moves none of them.
    EngineSnapshot& seen = seen_[WorkerKey(w.model, w.profile, w.generation)];
    auto add = [](prometheus::Counter* c, int64_t value, int64_t& last) {
      if (value > last) c->Increment(double(value - last));
      last = std::max(last, value);
    };
    add(m.prefix_queries, now.prefix_queries, seen.prefix_queries);
    add(m.prefix_hits, now.prefix_hits, seen.prefix_hits);
    add(m.preemptions, now.preemptions, seen.preemptions);
    add(m.kv_share_hit_tokens, now.kv_share_hit_tokens, seen.kv_share_hit_tokens);
    add(m.kv_share_hit_blocks, now.kv_share_hit_blocks, seen.kv_share_hit_blocks);
    add(m.kv_share_published_blocks, now.kv_share_published_blocks, seen.kv_share_published_blocks);
    std::vector<double> buckets(kIterationTokenBuckets.size() + 1, 0.0);
    bool stepped = false;
    for (size_t i = 0; i < buckets.size(); ++i) {
      const uint64_t n = now.iteration_tokens.counts[i], last = seen.iteration_tokens.counts[i];
      if (n > last) {
        buckets[i] = double(n - last);
        seen.iteration_tokens.counts[i] = n;
        stepped = true;
      }
    }
    if (stepped) {
      const uint64_t sum_tokens = now.iteration_tokens.sum, last = seen.iteration_tokens.sum;
      m.iteration_tokens->ObserveMultiple(buckets,
                                          double(sum_tokens > last ? sum_tokens - last : 0));
      seen.iteration_tokens.sum = std::max(last, sum_tokens);
    }
    // The pool this worker has; a new series (and the old one gone) when it changes.
    const prometheus::Labels config = {{"model_name", w.model},
                                       {"profile", w.profile},
                                       {"block_size", std::to_string(now.kv_block_size)},
                                       {"num_gpu_blocks", std::to_string(now.kv_blocks_total)}};
    prometheus::Gauge*& info = m.cache_config[w.profile];
    prometheus::Gauge* current = &cache_config_.Add(config);
    if (info && info != current) cache_config_.Remove(info);
    info = current;
    info->Set(1);
  }
  for (const auto& [name, sum] : sums) {
    PerModel& m = model(name);
    m.running->Set(sum.running);
    m.waiting->Set(sum.waiting);
    m.kv_usage->Set(sum.kv_total > 0 ? double(sum.kv_used) / double(sum.kv_total) : 0.0);
  }
}

void Metrics::set_workers(int alive, int64_t restarts) {
  std::lock_guard lock(mutex_);
  workers_alive_.Set(alive);
  if (restarts > seen_restarts_) {
    worker_restarts_.Increment(double(restarts - seen_restarts_));
    seen_restarts_ = restarts;
  }
}

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace hearth::gateway
