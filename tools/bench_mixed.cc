#include "tools/bench_mixed.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <stdexcept>

#include "tools/bench_stats.h"
#include "tools/mixed_workload.h"
#include "weight-server/model/device_store.h"
#include "weight-server/model/hf_model.h"
#include "worker/engine/cuda/cuda_batch_backend.h"
#include "worker/engine/engine.h"

namespace hearth::bench {

namespace {

using json = nlohmann::json;

std::vector<Request> workload(const MixedBenchOptions& o, int vocab) {
  // Seed 23: the workload hearth-gateway-bench --mixed sends by default.
  const std::vector<MixedDraw> draws =
      mixed_draws(23, o.requests, {o.min_prompt, o.max_prompt, o.min_output, o.max_output}, vocab);
  std::vector<Request> requests(o.requests);
  for (int i = 0; i < o.requests; ++i) {
    Request& r = requests[i];
    r.id = std::to_string(i);
    r.prompt = draws[i].prompt;
    r.settings.max_tokens = draws[i].max_tokens;
    r.settings.ignore_eos = true;
    r.settings.sampling.temperature = o.temperature;
    r.settings.sampling.seed = uint64_t(i);
  }
  return requests;
}

json run_budget(CudaBatchBackend& backend, const MixedBenchOptions& o, const ModelConfig& c,
                int budget) {
  EngineOptions options = o.engine;
  options.decode_step_tokens = budget;
  Engine engine(backend, options, nullptr, {});
  std::deque<Request> queue;
  for (Request& r : workload(o, c.vocab)) queue.push_back(std::move(r));
  std::map<std::string, Clock::time_point> submitted;
  TokenLatencies latency;
  std::vector<double> wall, gpu, step_tokens;
  uint64_t generated = 0;
  int finished = 0;
  const Clock::time_point start = Clock::now();
  auto refill = [&] {
    while (!queue.empty() && int(submitted.size()) < o.streams) {
      submitted.emplace(queue.front().id, Clock::now());
      engine.submit(std::move(queue.front()));
      queue.pop_front();
    }
  };
  refill();
  while (engine.has_work()) {
    const Clock::time_point t0 = Clock::now();
    const std::vector<RequestOutput> outputs = engine.step();
    const Clock::time_point t1 = Clock::now();
    const double gpu_ms = backend.last_step_device_ms();
    wall.push_back(ms_between(t0, t1));
    if (gpu_ms >= 0) gpu.push_back(gpu_ms);
    step_tokens.push_back(engine.stats().last_step_tokens);
    for (const RequestOutput& out : outputs) {
      generated += out.tokens.size();
      latency.add(out.id, out.tokens.size(), submitted.at(out.id), t1);
      if (out.finish) {
        if (out.finish->reason != FinishReason::Length)
          throw std::runtime_error("request " + out.id + " ended with " +
                                   finish_reason_name(out.finish->reason) + ": " +
                                   out.finish->error);
        ++finished;
        submitted.erase(out.id);
        latency.forget(out.id);
      }
    }
    refill();
  }
  const double wall_s = ms_between(start, Clock::now()) / 1e3;
  const EngineStats s = engine.stats();
  json r = {{"decode_step_tokens", budget},
            {"max_batch_tokens", options.max_batch_tokens},
            {"requests", finished},
            {"generated_tokens", generated},
            {"wall_s", wall_s},
            {"output_tok_s", double(generated) / wall_s},
            {"itl_ms_max", percentile(latency.itl, 1.0)},
            {"step_ms_p50", percentile(wall, 0.5)},
            {"step_ms_p99", percentile(wall, 0.99)},
            {"step_gpu_ms_p50", percentile(gpu, 0.5)},
            {"step_gpu_ms_p99", percentile(gpu, 0.99)},
            {"step_tokens_mean", mean(step_tokens)},
            {"steps", s.steps},
            {"preemptions", s.preemptions}};
  r.update(latency_percentiles(latency));
  std::fprintf(
      stderr,
      "mixed: decode_step_tokens %5d  %8.1f tok/s  ITL p50 %6.2f p99 %7.2f ms  TTFT p50 %7.1f p99 "
      "%7.1f ms  step p50 %.2f p99 %.2f ms (GPU %.2f / %.2f)\n",
      budget, r["output_tok_s"].get<double>(), r["itl_ms_p50"].get<double>(),
      r["itl_ms_p99"].get<double>(), r["ttft_ms_p50"].get<double>(), r["ttft_ms_p99"].get<double>(),
      r["step_ms_p50"].get<double>(), r["step_ms_p99"].get<double>(),
      r["step_gpu_ms_p50"].get<double>(), r["step_gpu_ms_p99"].get<double>());
  return r;
}

}  // namespace

json mixed_bench(const MixedBenchOptions& o) {
  if (o.budgets.empty()) throw std::runtime_error("--budgets lists no token budget");
  for (int b : o.budgets)
    if (b < 0) throw std::runtime_error("--budgets: token budgets must be at least 0 (off)");
  if (o.streams < 1 || o.requests < 1) throw std::runtime_error("--streams, --mixed-requests < 1");
  if (o.min_prompt < 1 || o.max_prompt < o.min_prompt || o.min_output < 1 ||
      o.max_output < o.min_output)
    throw std::runtime_error("mixed lengths must be positive ranges");
  EngineOptions engine = o.engine;
  engine.max_running = o.streams;
  const int context = o.max_prompt + o.max_output;

  std::fprintf(stderr, "mixed: loading %s\n", o.model_dir.c_str());
  const HfModel hf = HfModel::open(o.model_dir);
  const ModelConfig& c = hf.config();
  UploadOptions up;
  up.progress = true;
  std::shared_ptr<DeviceStore> store = DeviceStore::upload(hf, up);
  CudaBatchBackend backend(store, engine, context);
  backend.capture_decode_graphs(context);

  MixedBenchOptions opt = o;
  opt.engine = engine;
  // An unreported warm-up: the first prompt chunks of each shape set their kernels up.
  {
    MixedBenchOptions warm = opt;
    warm.requests = std::min(o.requests, o.streams);
    warm.max_output = warm.min_output;
    run_budget(backend, warm, c, 0);
  }
  json runs = json::array();
  for (int budget : o.budgets) runs.push_back(run_budget(backend, opt, c, budget));

  const std::string label = o.label.empty() ? o.model_dir : o.label;
  std::printf(
      "\n| %s, mixed: %d streams, %d requests, prompts %d-%d, outputs %d-%d, max_batch_tokens %d | "
      "output tok/s | ITL p50 / p99 ms | TTFT p50 / p99 ms | step p50 / p99 ms (GPU p50 / p99) "
      "|\n|---|---|---|---|"
      "---|\n",
      label.c_str(), o.streams, o.requests, o.min_prompt, o.max_prompt, o.min_output, o.max_output,
      engine.max_batch_tokens);
  for (const json& r : runs)
    std::printf(
        "| decode_step_tokens %d | %.0f | %.2f / %.2f | %.0f / %.0f | %.2f / %.2f (%.2f / "
        "%.2f) |\n",
        r["decode_step_tokens"].get<int>(), r["output_tok_s"].get<double>(),
        r["itl_ms_p50"].get<double>(), r["itl_ms_p99"].get<double>(),
        r["ttft_ms_p50"].get<double>(), r["ttft_ms_p99"].get<double>(),
        r["step_ms_p50"].get<double>(), r["step_ms_p99"].get<double>(),
        r["step_gpu_ms_p50"].get<double>(), r["step_gpu_ms_p99"].get<double>());
  std::fflush(stdout);
  return {{"mode", "serve-mixed"},
          {"model", {{"label", label}, {"parameters", c.parameter_count()}}},
          {"workload",
           {{"streams", o.streams},
            {"requests", o.requests},
            {"prompt_tokens", {o.min_prompt, o.max_prompt}},
            {"output_tokens", {o.min_output, o.max_output}},
            {"temperature", o.temperature}}},
          {"runs", runs}};
}

}  // namespace hearth::bench
