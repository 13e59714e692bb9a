// hearth-tp-bench: decode speed of the batched CUDA engine at tensor_parallel 1 and N in one
// process (worker/engine/cuda/cuda_tp_backend.h, issue 26): for each degree and concurrency,
// `concurrency` greedy requests of a fixed prompt run to the end through Engine; prints output
// tok/s, the median steady decode step (one token for every sequence) and the GPU memory in use
// on each device, as a markdown table and, with --json, as JSON. Each degree runs with decode
// graphs (one per rank) and eager.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda_check.h"
#include "weight-server/model/device_store.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "worker/engine/cuda/cuda_batch_backend.h"
#include "worker/engine/cuda/cuda_tp_backend.h"
#include "worker/engine/engine.h"

namespace {

using namespace hearth;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

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

struct Level {
  double tok_s = 0, step_ms_p50 = 0;
};

Level run_level(Backend& backend, const EngineOptions& o, int vocab, int concurrency,
                int prompt_tokens, int output_tokens) {
  Engine engine(backend, o, nullptr, {});
  for (int i = 0; i < concurrency; ++i) {
    Request r;
    r.id = std::to_string(i);
    r.prompt = prompt(prompt_tokens, vocab, concurrency * 1000 + i);
    r.settings.max_tokens = output_tokens;
    r.settings.ignore_eos = true;
    r.settings.sampling.temperature = 0;
    engine.submit(std::move(r));
  }
  std::vector<double> steps;
  uint64_t generated = 0, forwarded = 0;
  const Clock::time_point start = Clock::now();
  Clock::time_point end = start;
  while (engine.has_work()) {
    const Clock::time_point t0 = Clock::now();
    const std::vector<RequestOutput> outputs = engine.step();
    const Clock::time_point t1 = Clock::now();
    int tokens = 0;
    for (const RequestOutput& out : outputs) {
      tokens += int(out.tokens.size());
      if (out.finish && out.finish->reason == FinishReason::Error)
        throw std::runtime_error("request " + out.id + " failed: " + out.finish->error);
      if (out.finish) end = t1;
    }
    generated += uint64_t(tokens);
    const EngineStats s = engine.stats();
    if (tokens == concurrency && s.forwarded_tokens - forwarded == uint64_t(concurrency))
      steps.push_back(ms_between(t0, t1));
    forwarded = s.forwarded_tokens;
  }
  Level l;
  l.tok_s = double(generated) / (ms_between(start, end) / 1e3);
  if (!steps.empty()) {
    std::sort(steps.begin(), steps.end());
    l.step_ms_p50 = steps[steps.size() / 2];
  }
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hearth-tp-bench: batched CUDA decode at tensor_parallel 1 and N (one process, N GPUs), "
      "decode graphs on and off: output tok/s, decode step, GPU memory per device"};
  std::string model_dir, json_path;
  std::vector<int> tps{1, 2}, concurrency{1};
  int prompt_tokens = 128, output_tokens = 128;
  app.add_option("--model", model_dir, "model directory (HF safetensors)")->required();
  app.add_option("--tp", tps, "tensor_parallel degrees (a,b,...)")->delimiter(',');
  app.add_option("--concurrency", concurrency, "requests at once (a,b,...)")->delimiter(',');
  app.add_option("--prompt-tokens", prompt_tokens, "tokens per prompt");
  app.add_option("--output-tokens", output_tokens, "tokens generated per request");
  app.add_option("--json", json_path, "also write the rows as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    auto hf = std::make_shared<HfModel>(HfModel::open(model_dir));
    const ModelConfig& c = hf->config();
    const int context = prompt_tokens + output_tokens;
    json rows = json::array();
    std::printf(
        "| %s | output tok/s | decode step ms (p50) | GPU memory GB per device |\n"
        "|---|---|---|---|\n",
        model_dir.c_str());
    for (int tp : tps) {
      for (bool graphs : {true, false}) {
        EngineOptions o;
        o.max_running = *std::max_element(concurrency.begin(), concurrency.end());
        o.cuda_graphs = graphs;
        o.tensor_parallel = tp;
        std::unique_ptr<Backend> backend;
        std::shared_ptr<const WeightStore> device_store;
        if (tp == 1) {
          device_store = DeviceStore::upload(*hf, {});
          auto b = std::make_unique<CudaBatchBackend>(device_store, o, context);
          if (graphs) b->capture_decode_graphs(context);
          backend = std::move(b);
        } else {
          backend = std::make_unique<CudaTpBackend>(HostStore(hf), o, context);
        }
        const std::vector<double> memory = used_gb();
        std::string mem;
        for (double g : memory) mem += (mem.empty() ? "" : " / ") + std::to_string(g).substr(0, 5);
        for (int level : concurrency) {
          const Level l = run_level(*backend, o, c.vocab, level, prompt_tokens, output_tokens);
          const std::string name = "TP=" + std::to_string(tp) + (graphs ? " graphs" : " eager") +
                                   ", c=" + std::to_string(level);
          std::printf("| %s | %.1f | %.3f | %s |\n", name.c_str(), l.tok_s, l.step_ms_p50,
                      mem.c_str());
          std::fflush(stdout);
          rows.push_back({{"tensor_parallel", tp},
                          {"cuda_graphs", graphs},
                          {"concurrency", level},
                          {"output_tok_s", l.tok_s},
                          {"decode_step_ms_p50", l.step_ms_p50},
                          {"gpu_memory_gb", memory}});
        }
      }
    }
    if (!json_path.empty()) {
      FILE* f = std::fopen(json_path.c_str(), "w");
      if (!f) throw std::runtime_error("cannot write " + json_path);
      const std::string text = json{{"model", model_dir}, {"rows", rows}}.dump(1);
      std::fputs(text.c_str(), f);
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearth-tp-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
