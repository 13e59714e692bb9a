#include "tools/bench_prefix.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <thread>
#include <map>
#include <numeric>
#include <stdexcept>

#include <unistd.h>

#include "worker/engine/backend_factory.h"
#include "tools/bench_stats.h"
#include "worker/engine/engine.h"
#include "worker/engine/profile.h"
#include "worker/worker_model.h"

namespace hearth::bench {

namespace {

using json = nlohmann::json;
// Token ids spread over the vocabulary (never 0), different for each `salt`.
std::vector<int32_t> tokens(int n, int vocab, uint64_t salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i)
    t[i] = int32_t(1 + (uint64_t(i) * 2654435761u + salt * 40503u + 7) % uint64_t(vocab - 1));
  return t;
}

struct Variant {
  const char* name;
  bool shared_prefix, cache;
};

// One run: a fresh engine (so an empty cache) on the shared backend, at most `concurrency`
// requests in it at once, the next submitted as one finishes.
json run_variant(Backend& backend, const PrefixBenchOptions& o, const Variant& v,
                 const std::string& model_identity, int requests) {
  EngineOptions options = o.engine;
  options.prefix_cache = v.cache;
  Engine engine(backend, options, nullptr, {}, model_identity);
  const int vocab = backend.vocab_size();
  std::deque<Request> queue;
  for (int i = 0; i < requests; ++i) {
    Request r;
    r.id = std::to_string(i);
    r.prompt = tokens(o.prefix_tokens, vocab, v.shared_prefix ? 0 : uint64_t(1 + i));
    const std::vector<int32_t> suffix = tokens(o.suffix_tokens, vocab, uint64_t(100000 + i));
    r.prompt.insert(r.prompt.end(), suffix.begin(), suffix.end());
    r.settings.max_tokens = o.output_tokens;
    r.settings.ignore_eos = true;
    r.settings.sampling.temperature = 0;
    queue.push_back(std::move(r));
  }
  std::map<std::string, Clock::time_point> submitted;
  std::vector<double> ttft;
  uint64_t generated = 0, cached = 0;
  int in_flight = 0;
  const Clock::time_point start = Clock::now();
  auto refill = [&] {
    while (in_flight < o.concurrency && !queue.empty()) {
      submitted[queue.front().id] = Clock::now();
      engine.submit(std::move(queue.front()));
      queue.pop_front();
      ++in_flight;
    }
  };
  refill();
  while (engine.has_work()) {
    const std::vector<RequestOutput> outputs = engine.step();
    const Clock::time_point now = Clock::now();
    for (const RequestOutput& out : outputs) {
      generated += out.tokens.size();
      if (!out.tokens.empty() && submitted.contains(out.id)) {
        ttft.push_back(ms_between(submitted.at(out.id), now));
        submitted.erase(out.id);  // the first token only
      }
      if (out.finish) {
        if (out.finish->reason != FinishReason::Length)
          throw std::runtime_error("request " + out.id + " ended with " +
                                   finish_reason_name(out.finish->reason) + ": " +
                                   out.finish->error);
        cached += uint64_t(out.finish->cached_tokens);
        --in_flight;
      }
    }
    refill();
  }
  const double total_s = ms_between(start, Clock::now()) / 1e3;
  const EngineStats s = engine.stats();
  json r = {{"variant", v.name},
            {"shared_prefix", v.shared_prefix},
            {"prefix_cache", v.cache},
            {"requests", requests},
            {"total_s", total_s},
            {"output_tok_s", double(generated) / total_s},
            {"ttft_ms_mean", mean(ttft)},
            {"ttft_ms_p99", percentile(ttft, 0.99)},
            {"cached_tokens", cached},
            {"prefix_cache_queries", s.prefix_cache_queries},
            {"prefix_cache_hits", s.prefix_cache_hits},
            {"prefix_cache_evicted_blocks", s.prefix_cache_evicted_blocks},
            {"forwarded_tokens", s.forwarded_tokens},
            {"generated_tokens", generated},
            {"steps", s.steps},
            {"preemptions", s.preemptions}};
  std::fprintf(stderr,
               "prefix: %-14s %7.2f s  %8.1f tok/s  TTFT mean %8.1f ms p99 %8.1f ms  cached %llu\n",
               v.name, total_s, r["output_tok_s"].get<double>(), r["ttft_ms_mean"].get<double>(),
               r["ttft_ms_p99"].get<double>(), static_cast<unsigned long long>(cached));
  return r;
}

}  // namespace

json describe_host() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string cpu;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; cpu.empty() && std::getline(info, line);)
    if (line.starts_with("model name"))
      cpu = line.substr(std::min(line.size(), line.find(':') + 2));
  return {{"host", host}, {"cpu", cpu}, {"cpu_threads", std::thread::hardware_concurrency()}};
}

void add_prefix_bench_flags(CLI::App& app, PrefixBenchOptions& o) {
  app.add_option("--shared-prefix", o.prefix_tokens,
                 "with --serve-bench: the prefix-caching workload, with this many prefix tokens "
                 "(2000 is the reference)")
      ->capture_default_str();
  app.add_option("--suffix-tokens", o.suffix_tokens,
                 "with --shared-prefix: each request's own tokens after the prefix")
      ->capture_default_str();
  app.add_option("--prefix-requests", o.requests, "with --shared-prefix: requests per run")
      ->capture_default_str();
  app.add_option("--prefix-concurrency", o.concurrency,
                 "with --shared-prefix: requests in the engine at once")
      ->capture_default_str();
}

json prefix_bench(const PrefixBenchOptions& o) {
  if (o.requests < 1 || o.concurrency < 1 || o.prefix_tokens < 1 || o.suffix_tokens < 1 ||
      o.output_tokens < 1)
    throw std::runtime_error(
        "--prefix-requests, --prefix-concurrency, --shared-prefix, --suffix-tokens and "
        "--output-tokens must be positive");
  PrefixBenchOptions opt = o;
  opt.engine.max_running = o.concurrency;
  const int context = o.prefix_tokens + o.suffix_tokens + o.output_tokens;
  if (opt.engine.context_length == 0) opt.engine.context_length = context;

  std::fprintf(stderr, "prefix: loading %s\n", o.model_dir.c_str());
  const WorkerModel model = open_model_dir(o.model_dir);
  const std::unique_ptr<Backend> backend = make_backend(opt.engine, model.weights());
  const ModelConfig& c = model.store->config();
  std::fprintf(stderr, "prefix: %s backend, KV pool %d blocks of %d\n", backend->name().c_str(),
               backend->kv_pool().num_blocks, backend->kv_pool().block_size);

  // A short run first, not reported: lazy set-up (graphs, workspaces) is nobody's cost.
  run_variant(*backend, opt, {"warm-up", false, false}, model.identity, std::min(o.requests, 4));
  const Variant variants[] = {{"shared, on", true, true},
                              {"shared, off", true, false},
                              {"distinct, on", false, true},
                              {"distinct, off", false, false}};
  json runs = json::array();
  for (const Variant& v : variants)
    runs.push_back(run_variant(*backend, opt, v, model.identity, o.requests));

  auto ratio = [&](int a, int b, const char* key) {
    return runs[a][key].get<double>() / runs[b][key].get<double>();
  };
  const json summary = {
      {"shared_ttft_mean_off_over_on", ratio(1, 0, "ttft_ms_mean")},
      {"shared_ttft_p99_off_over_on", ratio(1, 0, "ttft_ms_p99")},
      {"shared_total_off_over_on", ratio(1, 0, "total_s")},
      {"distinct_total_on_over_off", ratio(2, 3, "total_s")},
  };

  const std::string label = o.label.empty() ? o.model_dir : o.label;
  std::printf(
      "\n%s, %s backend: %d requests, %d at once, %d-token prefix + %d-token suffix, %d greedy "
      "output tokens\n\n| run | total s | output tok/s | TTFT mean / p99 ms | cached tokens |\n"
      "|---|---|---|---|---|\n",
      label.c_str(), backend->name().c_str(), o.requests, o.concurrency, o.prefix_tokens,
      o.suffix_tokens, o.output_tokens);
  for (const json& r : runs)
    std::printf("| %s | %.2f | %.1f | %.1f / %.1f | %llu |\n",
                r["variant"].get<std::string>().c_str(), r["total_s"].get<double>(),
                r["output_tok_s"].get<double>(), r["ttft_ms_mean"].get<double>(),
                r["ttft_ms_p99"].get<double>(),
                static_cast<unsigned long long>(r["cached_tokens"].get<uint64_t>()));
  std::printf(
      "\nshared prefix, cache off / on: mean TTFT %.2fx, p99 TTFT %.2fx, total time %.2fx; "
      "distinct prefixes, cache on / off: total time %.3fx\n",
      summary["shared_ttft_mean_off_over_on"].get<double>(),
      summary["shared_ttft_p99_off_over_on"].get<double>(),
      summary["shared_total_off_over_on"].get<double>(),
      summary["distinct_total_on_over_off"].get<double>());
  std::fflush(stdout);
  Profile settings;
  settings.engine = opt.engine;
  return {{"mode", "serve-shared-prefix"},
          {"machine", o.machine},
          {"model",
           {{"label", label},
            {"dir", o.model_dir},
            {"identity", model.identity},
            {"architecture", c.architecture_name},
            {"parameters", c.parameter_count()},
            {"layers", c.n_layers}}},
          {"backend", backend->name()},
          {"workload",
           {{"requests", o.requests},
            {"concurrency", o.concurrency},
            {"prefix_tokens", o.prefix_tokens},
            {"suffix_tokens", o.suffix_tokens},
            {"output_tokens", o.output_tokens},
            {"temperature", 0}}},
          {"engine",
           {{"settings", profile_to_json(settings)},
            {"kv_pool_blocks", backend->kv_pool().num_blocks},
            {"kv_block_size", backend->kv_pool().block_size}}},
          {"runs", runs},
          {"summary", summary}};
}

}  // namespace hearth::bench
