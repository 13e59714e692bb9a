#include "tools/bench_serve.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <stdexcept>

#include "weight-server/model/device_store.h"
#include "weight-server/model/hf_model.h"
#include "worker/engine/cuda/cuda_batch_backend.h"
#include "tools/bench_stats.h"
#include "tools/decode_roofline.h"
#include "tokenizer/tokenizer.h"
#include "worker/engine/engine.h"

namespace hearth::bench {

namespace {

using json = nlohmann::json;

std::vector<int32_t> prompt(int n, int vocab, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i)
    t[i] = int32_t((uint64_t(i) * 2654435761u + uint64_t(salt) * 40503u + 7) % uint64_t(vocab));
  return t;
}

// The steady decode step taken apart: `concurrency` sequences with kv_len positions each,
// the forward pass alone and the sampling alone (each synchronised; medians of 9). The pool
// is unused between levels, so the sequences take its first blocks. Null if they do not fit.
json decode_breakdown(CudaBatchBackend& backend, const ServeBenchOptions& o, int concurrency,
                      int kv_len) {
  const KvPoolShape pool = backend.kv_pool();
  const int per_seq = (kv_len + pool.block_size - 1) / pool.block_size;
  if (int64_t(per_seq) * concurrency > pool.num_blocks) return nullptr;
  std::vector<std::vector<int32_t>> tables(concurrency, std::vector<int32_t>(per_seq));
  for (int s = 0; s < concurrency; ++s)
    for (int b = 0; b < per_seq; ++b) tables[s][b] = s * per_seq + b;
  const int32_t token = 1;
  ForwardBatch batch;
  std::vector<SampleRequest> samples;
  // With json_object: a mask on every row (every third token allowed), uploaded and applied
  // each step as a structured request's is.
  std::vector<uint32_t> mask((size_t(backend.vocab_size()) + 31) / 32, 0x49249249u);
  for (int s = 0; s < concurrency; ++s) {
    batch.entries.push_back({std::span(&token, 1), kv_len - 1, tables[s], true});
    SampleRequest& r = samples.emplace_back();
    r.entry = s;
    r.params.temperature = o.temperature;
    r.params.seed = uint64_t(s);
    if (o.json_object) r.allowed = mask;
  }
  backend.forward(batch);
  backend.sample(samples);
  std::vector<double> forward_ms, sample_ms;
  for (int i = 0; i < 9; ++i) {
    const Clock::time_point t0 = Clock::now();
    backend.forward(batch);
    backend.synchronize();
    const Clock::time_point t1 = Clock::now();
    backend.sample(samples);
    forward_ms.push_back(ms_between(t0, t1));
    sample_ms.push_back(ms_between(t1, Clock::now()));
  }
  // The forward again, eagerly with events between its kernels: device ms per phase (means of
  // 5), where a step's time goes. Short kernels also carry their launches here (no graph).
  constexpr int kRuns = 5;
  std::array<double, StepPhases::kPhases> phase_ms{};
  for (int i = 0; i < kRuns; ++i) backend.profile_forward(batch, phase_ms);
  json phases = json::object();
  double eager_ms = 0;
  for (int p = 0; p < StepPhases::kPhases; ++p) {
    phases[std::string(step_phase_name(StepPhase(p)))] = phase_ms[p] / kRuns;
    eager_ms += phase_ms[p] / kRuns;
  }
  std::string line;
  for (const auto& [name, ms] : phases.items())
    line += " " + name + " " + std::to_string(ms.get<double>()).substr(0, 5);
  std::fprintf(stderr, "serve: c=%d decode step, eager %.2f ms by phase:%s\n", concurrency,
               eager_ms, line.c_str());
  return {{"kv_len", kv_len},
          {"forward_ms", percentile(forward_ms, 0.5)},
          {"sample_ms", percentile(sample_ms, 0.5)},
          {"eager_forward_ms", eager_ms},
          {"eager_phase_ms", phases}};
}

json run_level(CudaBatchBackend& backend, const ServeBenchOptions& o, const ModelConfig& c,
               int concurrency, const Tokenizer* tokenizer) {
  // End tokens matter only to structured output here (ignore_eos): once a JSON object is
  // complete only they are allowed.
  Engine engine(backend, o.engine, tokenizer,
                tokenizer ? std::vector<int32_t>(c.eos_ids.begin(), c.eos_ids.end())
                          : std::vector<int32_t>{});
  std::vector<Request> requests(concurrency);
  for (int i = 0; i < concurrency; ++i) {
    Request& r = requests[i];
    r.id = std::to_string(i);
    r.prompt = prompt(o.prompt_tokens, c.vocab, concurrency * 1000 + i);
    r.settings.max_tokens = o.output_tokens;
    r.settings.ignore_eos = true;
    r.settings.sampling.temperature = o.temperature;
    r.settings.sampling.seed = uint64_t(i);
    if (o.json_object) r.settings.structured = {OutputFormat::JsonObject, ""};
  }
  TokenLatencies latency;
  std::vector<double> full_decode_steps;
  // Full decode steps again, step start to next step start (wall) against the device's time
  // for the step: the difference is what the GPU waited for the host.
  std::vector<double> step_wall, step_gpu;
  std::optional<Clock::time_point> decode_began;
  double decode_gpu = 0;
  int peak_blocks = 0, finished = 0;
  uint64_t generated = 0;
  const Clock::time_point start = Clock::now();
  for (Request& r : requests) engine.submit(std::move(r));
  Clock::time_point end = start;
  uint64_t forwarded = 0;
  while (engine.has_work()) {
    const Clock::time_point t0 = Clock::now();
    if (decode_began) {
      step_wall.push_back(ms_between(*decode_began, t0));
      step_gpu.push_back(decode_gpu);
      decode_began.reset();
    }
    const std::vector<RequestOutput> outputs = engine.step();
    const Clock::time_point t1 = Clock::now();
    const double gpu_ms = backend.last_step_device_ms();
    const EngineStats s = engine.stats();
    peak_blocks = std::max(peak_blocks, s.kv_blocks_used);
    int tokens = 0;
    for (const RequestOutput& out : outputs) {
      latency.add(out.id, out.tokens.size(), start, t1);
      tokens += int(out.tokens.size());
      if (out.finish) {
        if (out.finish->reason != FinishReason::Length)
          throw std::runtime_error("request " + out.id + " ended with " +
                                   finish_reason_name(out.finish->reason) + ": " +
                                   out.finish->error);
        ++finished;
        end = t1;
      }
    }
    generated += tokens;
    // A step that ran one token for each of `concurrency` sequences: the steady decode step.
    if (tokens == concurrency && s.forwarded_tokens - forwarded == uint64_t(concurrency)) {
      full_decode_steps.push_back(ms_between(t0, t1));
      if (gpu_ms >= 0) decode_began = t0, decode_gpu = gpu_ms;
    }
    forwarded = s.forwarded_tokens;
  }
  const EngineStats s = engine.stats();
  const double wall_s = ms_between(start, end) / 1e3;
  // The roofline: every step streams the weights once; every generated token after the first
  // reads its sequence's KV (prompt + k positions), the prompt's KV is written and read once.
  const double per_token = double(CudaBatchBackend::kv_bytes_per_token(c, o.engine.kv_cache_dtype));
  const double p = o.prompt_tokens, n = o.output_tokens;
  const double kv_bytes = run_kv_bytes(concurrency, per_token, p, n);
  const double bytes = double(s.steps) * double(decode_weight_bytes(c)) + kv_bytes;
  const double roofline_s = bytes / (o.copy_gbps * 1e9);
  const KvPoolShape pool = backend.kv_pool();
  json r = {{"concurrency", concurrency},
            {"requests", finished},
            {"generated_tokens", generated},
            {"wall_s", wall_s},
            {"output_tok_s", double(generated) / wall_s},
            {"full_decode_step_ms_p50", percentile(full_decode_steps, 0.5)},
            {"full_decode_steps", full_decode_steps.size()},
            {"decode_step_wall_ms_p50", percentile(step_wall, 0.5)},
            {"decode_step_gpu_ms_p50", percentile(step_gpu, 0.5)},
            {"decode_step_gpu_idle_ms_p50", percentile(idle_ms(step_wall, step_gpu), 0.5)},
            {"steps", s.steps},
            {"forwarded_tokens", s.forwarded_tokens},
            {"preemptions", s.preemptions},
            {"kv_peak_blocks", peak_blocks},
            {"kv_total_blocks", pool.num_blocks},
            {"kv_peak_fraction", double(peak_blocks) / pool.num_blocks},
            {"roofline_gb", bytes / 1e9},
            {"roofline_s", roofline_s},
            {"roofline_tok_s", double(generated) / roofline_s},
            {"fraction_of_roofline", roofline_s / wall_s}};
  r.update(latency_percentiles(latency));
  // The decode step at the workload's mean context: measured parts against its roofline.
  const int mean_kv = o.prompt_tokens + o.output_tokens / 2;
  r["decode_step"] = decode_breakdown(backend, o, concurrency, mean_kv);
  r["decode_step_roofline_ms"] =
      decode_step_roofline_ms(c, 1, concurrency, per_token, mean_kv, o.copy_gbps);
  std::fprintf(
      stderr,
      "serve: c=%3d  %8.1f tok/s  TTFT p50 %7.1f ms  ITL p50 %6.2f p99 %6.2f ms  "
      "step %6.2f ms (GPU %.2f, idle %.2f; roofline %.2f)  %4.1f%% of roofline\n",
      concurrency, r["output_tok_s"].get<double>(), r["ttft_ms_p50"].get<double>(),
      r["itl_ms_p50"].get<double>(), r["itl_ms_p99"].get<double>(),
      r["decode_step_wall_ms_p50"].get<double>(), r["decode_step_gpu_ms_p50"].get<double>(),
      r["decode_step_gpu_idle_ms_p50"].get<double>(), r["decode_step_roofline_ms"].get<double>(),
      100 * r["fraction_of_roofline"].get<double>());
  return r;
}

}  // namespace

json serve_bench(const ServeBenchOptions& o) {
  if (o.concurrency.empty()) throw std::runtime_error("--concurrency lists no level");
  for (int c : o.concurrency)
    if (c < 1) throw std::runtime_error("--concurrency levels must be positive");
  if (o.prompt_tokens < 1 || o.output_tokens < 1)
    throw std::runtime_error("--prompt-tokens and --output-tokens must be positive");
  ServeBenchOptions opt = o;
  opt.engine.max_running = *std::max_element(o.concurrency.begin(), o.concurrency.end());
  const int context = o.prompt_tokens + o.output_tokens;

  std::fprintf(stderr, "serve: loading %s\n", o.model_dir.c_str());
  const HfModel hf = HfModel::open(o.model_dir);
  const ModelConfig& c = hf.config();
  UploadOptions up;
  up.progress = true;
  std::shared_ptr<DeviceStore> store = DeviceStore::upload(hf, up);
  CudaBatchBackend backend(store, opt.engine, context);
  const Clock::time_point t = Clock::now();
  backend.capture_decode_graphs(context);
  const double capture_ms = ms_between(t, Clock::now());
  std::fprintf(stderr, "serve: %d decode graphs captured in %.0f ms; KV pool %d blocks (%.1f GB)\n",
               backend.decode_graphs(), capture_ms, backend.kv_pool().num_blocks,
               backend.kv_pool_bytes() / 1e9);

  // The tiling each matrix gets per band of row counts (16, 32, ..., 2048, more).
  json tiling = json::object();
  const char* shapes[] = {"q", "k/v", "o", "gate/up", "down", "lm_head"};
  const char* tiles[] = {"auto", "skinny", "medium", "large"};
  for (int s = 0; s < CudaBatchBackend::kMatmulShapes; ++s)
    for (kernels::MatmulTiles t : backend.matmul_tiling()[s])
      tiling[shapes[s]].push_back(tiles[int(t)]);
  std::fprintf(stderr, "serve: matmul tiling (%s) %s\n",
               std::string(option_name(opt.engine.matmul_tiling)).c_str(), tiling.dump().c_str());

  json levels = json::array();
  std::optional<Tokenizer> tokenizer;
  if (o.json_object) {
    tokenizer = Tokenizer::from_file(o.model_dir);
    if (c.eos_ids.empty()) throw std::runtime_error("--json-object: the model names no eos id");
  }
  for (int level : o.concurrency)
    levels.push_back(run_level(backend, opt, c, level, tokenizer ? &*tokenizer : nullptr));

  const std::string label = o.label.empty() ? o.model_dir : o.label;
  std::printf(
      "\n| %s%s%s%s | output tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | decode step ms: "
      "forward "
      "+ "
      "sample (roofline) | step wall / GPU ms | KV peak | of roofline (%.0f GB/s) "
      "|\n|---|---|---|---|---|---|---|---|\n",
      label.c_str(), c.quantization.fp8() ? " (fp8)" : "",
      opt.engine.batch_invariant ? "" : " (batch_invariant: false)",
      o.json_object ? " (json_object)" : "", o.copy_gbps);
  for (const json& l : levels) {
    const json& d = l["decode_step"];
    const double fwd = d.is_null() ? 0 : d["forward_ms"].get<double>(),
                 smp = d.is_null() ? 0 : d["sample_ms"].get<double>();
    std::printf(
        "| c=%d | %.0f | %.1f / %.1f | %.2f / %.2f | %.2f + %.2f (%.2f) | %.2f / %.2f | %.1f%% | "
        "%.1f%% |\n",
        l["concurrency"].get<int>(), l["output_tok_s"].get<double>(),
        l["ttft_ms_p50"].get<double>(), l["ttft_ms_p99"].get<double>(),
        l["itl_ms_p50"].get<double>(), l["itl_ms_p99"].get<double>(), fwd, smp,
        l["decode_step_roofline_ms"].get<double>(), l["decode_step_wall_ms_p50"].get<double>(),
        l["decode_step_gpu_ms_p50"].get<double>(), 100 * l["kv_peak_fraction"].get<double>(),
        100 * l["fraction_of_roofline"].get<double>());
  }
  std::fflush(stdout);
  return {{"mode", "serve"},
          {"model",
           {{"label", label},
            {"parameters", c.parameter_count()},
            {"layers", c.n_layers},
            {"projections", c.quantization.fp8() ? "fp8" : "16-bit"}}},
          {"workload",
           {{"prompt_tokens", o.prompt_tokens},
            {"output_tokens", o.output_tokens},
            {"temperature", o.temperature}}},
          {"engine",
           {{"max_batch_tokens", opt.engine.max_batch_tokens},
            {"max_running", opt.engine.max_running},
            {"kv_block_size", opt.engine.kv_block_size},
            {"cuda_graphs", opt.engine.cuda_graphs},
            {"matmul_tiling", option_name(opt.engine.matmul_tiling)},
            {"batch_invariant", opt.engine.batch_invariant},
            {"kv_cache_dtype", option_name(opt.engine.kv_cache_dtype)},
            {"kv_pool_blocks", backend.kv_pool().num_blocks},
            {"kv_pool_gb", backend.kv_pool_bytes() / 1e9},
            {"workspace_gb", (backend.workspace_bytes() - backend.kv_pool_bytes()) / 1e9},
            {"decode_graphs", backend.decode_graphs()},
            {"graph_capture_ms", capture_ms}}},
          {"weights_gb", store->device_bytes() / 1e9},
          {"copy_gbps", o.copy_gbps},
          {"levels", levels}};
}

}  // namespace hearth::bench
