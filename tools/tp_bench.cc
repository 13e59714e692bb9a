// hearth-tp-bench: the batched CUDA engine serving at tensor_parallel 1 and N in one process
// (worker/engine/cuda/cuda_tp_backend.h, issue 26). For each degree and concurrency level,
// `concurrency` greedy requests of `--prompt-tokens` random tokens are submitted at once and run
// to `--output-tokens` through Engine (as hearth-bench --serve-bench does on one GPU): output
// tok/s, time to first token and inter-token latency (p50, p99), the median steady decode step
// (one token for every sequence), GPU memory in use on each device, and the fraction of the
// bandwidth roofline, where each GPU streams its 1/N of the weights every step and its 1/N of
// the KV heads for every token. A markdown table with the machine, model and settings, and with
// --json the same as JSON. Decode graphs (one per rank) by default; --eager adds eager rows.
// An fp8 model (hearth-synth --dtype fp8, or --quantize fp8 at load) runs its W8A8 projections
// on every rank; --set passes engine options (batch_invariant, kv_cache_dtype, ...).
// --processes runs each degree above 1 as one process per GPU (tensor_parallel_processes:
// hearth-tp-follower beside this binary), its decode graphs captured up front on every rank.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda_check.h"
#include "tools/bench_stats.h"
#include "tools/copy_bandwidth.h"
#include "tools/decode_roofline.h"
#include "weight-server/model/device_store.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "weight-server/model/quantize_at_load.h"
#include "worker/engine/cuda/cuda_batch_backend.h"
#include "worker/engine/cuda/cuda_tp_backend.h"
#include "worker/engine/engine.h"
#include "worker/engine/profile.h"
#include "worker/tp/tp_backend.h"
#include "worker/worker_model.h"

namespace {

using namespace hearth;
using bench::Clock;
using bench::ms_between;
using bench::percentile;
using json = nlohmann::json;

std::vector<int32_t> prompt(int n, int vocab, int salt) {
  std::vector<int32_t> t(size_t(n), 0);
  for (int i = 0; i < n; ++i)
    t[size_t(i)] =
        int32_t((uint64_t(i) * 2654435761u + uint64_t(salt) * 40503u + 7) % uint64_t(vocab));
  return t;
}

// GB in use on every device now (total - free), device 0 first.
std::vector<double> used_gb() {
  int n = 0;
  HEARTH_CUDA_CHECK(cudaGetDeviceCount(&n));
  int previous = 0;
  HEARTH_CUDA_CHECK(cudaGetDevice(&previous));
  std::vector<double> out;
  for (int d = 0; d < n; ++d) {
    HEARTH_CUDA_CHECK(cudaSetDevice(d));
    size_t free = 0, total = 0;
    HEARTH_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    out.push_back(double(total - free) / 1e9);
  }
  HEARTH_CUDA_CHECK(cudaSetDevice(previous));
  return out;
}

// The machine, for the table's header: host, GPU count and name(s).
json machine() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  int n = 0;
  HEARTH_CUDA_CHECK(cudaGetDeviceCount(&n));
  std::vector<std::string> names;
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    HEARTH_CUDA_CHECK(cudaGetDeviceProperties(&p, d));
    names.emplace_back(p.name);
  }
  return {{"host", host}, {"gpus", n}, {"gpu_names", names}};
}

struct Settings {
  int prompt_tokens = 128, output_tokens = 256;
  double copy_gbps = 0;  // one GPU's device-to-device copy bandwidth; 0: measured at start
};

// One level: `concurrency` requests submitted at once, run to the end.
json run_level(Backend& backend, const EngineOptions& o, const ModelConfig& c, int tp,
               int concurrency, const Settings& s) {
  Engine engine(backend, o, nullptr, {});
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < concurrency; ++i) {
    Request r;
    r.id = std::to_string(i);
    r.prompt = prompt(s.prompt_tokens, c.vocab, concurrency * 1000 + i);
    r.settings.max_tokens = s.output_tokens;
    r.settings.ignore_eos = true;
    r.settings.sampling.temperature = 0;
    engine.submit(std::move(r));
  }
  bench::TokenLatencies latency;
  std::vector<double> steps;
  uint64_t generated = 0, forwarded = 0;
  Clock::time_point end = start;
  while (engine.has_work()) {
    const Clock::time_point t0 = Clock::now();
    const std::vector<RequestOutput> outputs = engine.step();
    const Clock::time_point t1 = Clock::now();
    int tokens = 0;
    for (const RequestOutput& out : outputs) {
      latency.add(out.id, out.tokens.size(), start, t1);
      tokens += int(out.tokens.size());
      if (out.finish && out.finish->reason == FinishReason::Error)
        throw std::runtime_error("request " + out.id + " failed: " + out.finish->error);
      if (out.finish) end = t1;
    }
    generated += uint64_t(tokens);
    const EngineStats st = engine.stats();
    if (tokens == concurrency && st.forwarded_tokens - forwarded == uint64_t(concurrency))
      steps.push_back(ms_between(t0, t1));
    forwarded = st.forwarded_tokens;
  }
  const EngineStats st = engine.stats();
  const double wall_s = ms_between(start, end) / 1e3;
  // Per GPU: every step streams 1/tp of the weights; every generated token after the first
  // reads its sequence's KV (1/tp of the heads), the prompt's KV is written and read once.
  const double per_token = double(CudaBatchBackend::kv_bytes_per_token(c, o.kv_cache_dtype)) / tp;
  const double p = s.prompt_tokens, n = s.output_tokens;
  const double kv_bytes = bench::run_kv_bytes(concurrency, per_token, p, n);
  const double bytes = double(st.steps) * double(bench::decode_weight_bytes(c)) / tp + kv_bytes;
  const double roofline_s = bytes / (s.copy_gbps * 1e9);
  const double mean_kv = p + n / 2;
  json r = {{"tensor_parallel", tp},
            {"cuda_graphs", o.cuda_graphs},
            {"concurrency", concurrency},
            {"output_tok_s", double(generated) / wall_s},
            {"decode_step_ms_p50", percentile(steps, 0.5)},
            {"decode_step_roofline_ms",
             bench::decode_step_roofline_ms(c, tp, concurrency, per_token, mean_kv, s.copy_gbps)},
            {"steps", st.steps},
            {"wall_s", wall_s},
            {"roofline_gb_per_gpu", bytes / 1e9},
            {"fraction_of_roofline", roofline_s / wall_s}};
  r.update(bench::latency_percentiles(latency));
  return r;
}

std::string memory_text(const std::vector<double>& gb) {
  std::string out;
  char cell[32];
  for (double g : gb) {
    std::snprintf(cell, sizeof cell, "%.1f", g);
    out += (out.empty() ? "" : " / ") + std::string(cell);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hearth-tp-bench: the batched CUDA engine serving at tensor_parallel 1 and N (one "
      "process, N GPUs) at several concurrencies: output tok/s, TTFT and ITL p50/p99, decode "
      "step, GPU memory per device, fraction of the bandwidth roofline"};
  std::string model_dir, json_path, quantize = "none";
  std::vector<int> tps{1, 2}, concurrency{1, 8, 32, 64, 128, 256};
  std::vector<std::string> settings;
  Settings s;
  bool eager = false, processes = false;
  app.add_option("--model", model_dir, "model directory (HF safetensors)")->required();
  app.add_option("--tp", tps, "tensor_parallel degrees (a,b,...)")->delimiter(',');
  app.add_option("--concurrency", concurrency, "requests at once, one level each (a,b,...)")
      ->delimiter(',');
  app.add_option("--prompt-tokens", s.prompt_tokens, "tokens per prompt")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--output-tokens", s.output_tokens, "tokens generated per request")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--copy-gbps", s.copy_gbps,
                 "one GPU's copy bandwidth, GB/s, for the roofline (default: measured at start "
                 "on the first GPU; 3020 is an H100 SXM's)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--eager", eager, "also run every degree without decode graphs");
  app.add_flag("--processes", processes,
               "run degrees above 1 as one process per GPU (hearth-tp-follower), graphs "
               "captured up front on every rank");
  app.add_option("--quantize", quantize,
                 "fp8: a 16-bit model's projections quantized at load (as hearth-server "
                 "--quantize fp8); none: as the files hold them")
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_option("--set", settings,
                 "engine option key=value (repeatable; max_running defaults to the largest "
                 "concurrency; tensor_parallel and cuda_graphs come from --tp and --eager)");
  app.add_option("--json", json_path, "also write the machine, settings and rows as JSON here");
  CLI11_PARSE(app, argc, argv);
  try {
    if (concurrency.empty() || tps.empty()) throw std::runtime_error("no levels to run");
    Profile profile;
    profile.engine.max_running = *std::max_element(concurrency.begin(), concurrency.end());
    for (const std::string& setting : settings) {
      if (setting.starts_with("tensor_parallel=") || setting.starts_with("cuda_graphs="))
        throw std::runtime_error("--set " + setting +
                                 ": the degrees come from --tp, graphs from --eager");
      apply_profile_setting(profile, setting);
    }
    auto hf = std::make_shared<HfModel>(HfModel::open(model_dir));
    if (quantize == "fp8" && !hf->config().quantization.fp8())
      hf = std::make_shared<HfModel>(quantize_fp8_at_load(*hf, 8));
    const ModelConfig& c = hf->config();
    const bool copy_measured = s.copy_gbps == 0;  // after the model opened: its errors first
    s.copy_gbps = bench::copy_ceiling_gbps(s.copy_gbps);  // measured on the current (first) GPU
    const std::string weights = c.quantization.fp8() ? "fp8 e4m3 projections (W8A8)" : "16-bit";
    std::string set_text;
    for (const std::string& setting : settings) set_text += " " + setting;
    if (processes) set_text += " tensor_parallel_processes=true";
    std::optional<WorkerModel> opened;  // --processes: the followers open the same directory
    const int context = s.prompt_tokens + s.output_tokens;
    const json m = machine();
    std::printf("# %s on %s (%d x %s)\n", model_dir.c_str(), m["host"].get<std::string>().c_str(),
                m["gpus"].get<int>(),
                m["gpu_names"].empty() ? "?" : m["gpu_names"][0].get<std::string>().c_str());
    std::printf(
        "prompt %d tokens, output %d tokens (greedy, ignore_eos), all of a level submitted at "
        "once; roofline: %.0f GB/s per GPU, %.2f GB of weights / N per GPU per step\n"
        "weights: %s; engine options set:%s\n\n",
        s.prompt_tokens, s.output_tokens, s.copy_gbps, double(bench::decode_weight_bytes(c)) / 1e9,
        weights.c_str(), set_text.empty() ? " none" : set_text.c_str());
    std::printf(
        "| TP | graphs | c | output tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | decode step "
        "ms (roofline) | of roofline | GPU memory GB per device |\n"
        "|---|---|---|---|---|---|---|---|---|\n");
    json rows = json::array();
    for (int tp : tps) {
      for (bool graphs : {true, false}) {
        if (!graphs && !eager) continue;
        EngineOptions o = profile.engine;
        o.cuda_graphs = graphs;
        o.tensor_parallel = tp;
        std::unique_ptr<Backend> backend;
        std::shared_ptr<const WeightStore> device_store;
        if (tp == 1) {
          device_store = DeviceStore::upload(*hf, {});
          auto b = std::make_unique<CudaBatchBackend>(device_store, o, context);
          if (graphs) b->capture_decode_graphs(context);
          backend = std::move(b);
        } else if (processes) {
          o.tensor_parallel_processes = true;
          if (!opened) opened = open_model_dir(model_dir, quantize == "fp8");
          TpProcessOptions p;
          p.capture_decode_graphs = graphs ? context : 0;
          backend = make_process_tp_backend(o, opened->weights(),
                                            {.dir = model_dir,
                                             .server_socket = {},
                                             .model_name = {},
                                             .identity = opened->identity,
                                             .quantize_fp8 = quantize == "fp8"},
                                            p);
        } else {
          auto b = std::make_unique<CudaTpBackend>(HostStore(hf), o, context);
          if (graphs) b->capture_decode_graphs(context);
          backend = std::move(b);
        }
        const std::vector<double> memory = used_gb();
        for (int level : concurrency) {
          json r = run_level(*backend, o, c, tp, level, s);
          r["gpu_memory_gb"] = memory;
          std::printf(
              "| %d | %s | %d | %.1f | %.1f / %.1f | %.2f / %.2f | %.2f (%.2f) | %.1f%% | %s |\n",
              tp, graphs ? "on" : "off", level, r["output_tok_s"].get<double>(),
              r["ttft_ms_p50"].get<double>(), r["ttft_ms_p99"].get<double>(),
              r["itl_ms_p50"].get<double>(), r["itl_ms_p99"].get<double>(),
              r["decode_step_ms_p50"].get<double>(), r["decode_step_roofline_ms"].get<double>(),
              100 * r["fraction_of_roofline"].get<double>(), memory_text(memory).c_str());
          std::fflush(stdout);
          rows.push_back(std::move(r));
        }
      }
    }
    if (!json_path.empty()) {
      FILE* f = std::fopen(json_path.c_str(), "w");
      if (!f) throw std::runtime_error("cannot write " + json_path);
      const json out = {{"model", model_dir},
                        {"machine", m},
                        {"settings",
                         {{"prompt_tokens", s.prompt_tokens},
                          {"output_tokens", s.output_tokens},
                          {"copy_gbps", s.copy_gbps},
                          {"copy_gbps_source", copy_measured ? "measured" : "given"},
                          {"weight_bytes", bench::decode_weight_bytes(c)},
                          {"weights", weights},
                          {"quantize", quantize},
                          {"set", settings},
                          {"engine", profile_to_json(profile)},
                          {"greedy", true}}},
                        {"rows", rows}};
      const std::string text = out.dump(1);
      std::fputs(text.c_str(), f);
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearth-tp-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
