// hearth-bench: decode and prefill speed of the CUDA engine on a model directory, against the
// hardware ceilings (device-to-device copy bandwidth for decode, dense bf16 matmul rate for
// prefill). Prints a table and one JSON object with the machine, model and settings.
#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "weight-server/device_store.h"
#include "weight-server/hf_model.h"
#include "worker/cuda/cuda_backend.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) v.push_back(std::stoi(item));
  return v;
}

// Matrix parameters a token's forward pass multiplies with (everything but the embedding).
uint64_t matmul_params(const hearth::ModelConfig& c) {
  const uint64_t h = c.hidden;
  const uint64_t per_layer = h * c.q_dim() + 2 * h * c.kv_dim() + uint64_t(c.q_dim()) * h + 3 * h * c.intermediate;
  return per_layer * c.n_layers + h * c.vocab;  // + LM head
}

std::vector<int32_t> tokens(int n, int vocab, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = int32_t((uint64_t(i) * 2654435761u + salt) % uint64_t(vocab - 1)) + 1;
  return t;
}

int run(int argc, char** argv) {
  CLI::App app{"hearth-bench: CUDA engine decode/prefill speed against the hardware ceilings"};
  std::string model_dir, decode_list = "128,2048,8192", prefill_list = "512,2048,8192", json_path, layout = "per-tensor";
  std::string label;
  int decode_tokens = 128, repeats = 3;
  double copy_gbps = 3020, matmul_tflops = 796;
  std::vector<std::string> settings;
  app.add_option("--model", model_dir, "model directory")->required();
  app.add_option("--label", label, "model label in the report (default: directory name)");
  app.add_option("--decode-contexts", decode_list, "contexts to decode at (tokens already in the cache)");
  app.add_option("--decode-tokens", decode_tokens, "tokens decoded per measurement");
  app.add_option("--prefill", prefill_list, "prompt lengths to prefill");
  app.add_option("--repeats", repeats, "prefill repetitions (median reported)");
  app.add_option("--weights-layout", layout, "per-tensor | packed")->check(CLI::IsMember({"per-tensor", "packed"}));
  app.add_option("--set", settings, "profile key=value (repeatable)");
  app.add_option("--copy-gbps", copy_gbps, "decode ceiling: device-to-device copy bandwidth, GB/s");
  app.add_option("--matmul-tflops", matmul_tflops, "prefill ceiling: dense bf16 matmul rate, TFLOP/s");
  app.add_option("--json", json_path, "also write the JSON report here");
  CLI11_PARSE(app, argc, argv);
  if (label.empty()) label = fs::path(model_dir).filename().string();

  hearth::Profile profile;
  for (const std::string& s : settings) {
    const size_t eq = s.find('=');
    json v = json::parse(s.substr(eq + 1), nullptr, false);
    if (v.is_discarded()) v = s.substr(eq + 1);
    hearth::apply_profile_json(profile, json{{s.substr(0, eq), v}}, "--set");
  }
  const std::vector<int> decode_ctx = parse_list(decode_list), prefill_lens = parse_list(prefill_list);
  int context = 1;
  for (int c : decode_ctx) context = std::max(context, c + decode_tokens + 1);
  for (int n : prefill_lens) context = std::max(context, n + 1);

  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) throw std::runtime_error("no CUDA device was found");
  int driver = 0;
  cudaDriverGetVersion(&driver);
  char host[256] = {};
  gethostname(host, sizeof host - 1);

  std::fprintf(stderr, "bench: loading %s\n", model_dir.c_str());
  auto t0 = Clock::now();
  hearth::HfModel hf = hearth::HfModel::open(model_dir);
  hearth::UploadOptions up;
  up.layout = layout == "packed" ? hearth::DeviceLayout::Packed : hearth::DeviceLayout::PerTensor;
  up.progress = true;
  size_t free0 = 0, total_mem = 0;
  cudaSetDevice(0);
  cudaFree(nullptr);
  cudaMemGetInfo(&free0, &total_mem);
  std::shared_ptr<hearth::DeviceStore> store = hearth::DeviceStore::upload(hf, up);
  const double load_s = seconds_since(t0);
  const hearth::ModelConfig& c = hf.config();
  hearth::CudaBackend gpu(store, profile, context);
  size_t free1 = 0;
  cudaMemGetInfo(&free1, &total_mem);

  const uint64_t weight_bytes_per_token = matmul_params(c) * 2;
  const uint64_t kv_bytes_per_position = uint64_t(c.n_layers) * c.kv_dim() * 2 * 2;  // K and V, 16-bit
  const uint64_t matmul_flops_per_token = 2 * matmul_params(c);

  json report = {{"machine", {{"gpu", prop.name}, {"sms", prop.multiProcessorCount},
                              {"memory_gb", total_mem / 1e9}, {"driver", driver}, {"host", host}}},
                 {"model", {{"label", label}, {"architecture", c.architecture_name},
                            {"parameters", c.parameter_count()}, {"layers", c.n_layers},
                            {"hidden", c.hidden}, {"vocab", c.vocab}}},
                 {"settings", hearth::profile_to_json(profile)},
                 {"ceilings", {{"copy_gbps", copy_gbps}, {"matmul_tflops", matmul_tflops}}},
                 {"weights", {{"layout", layout}, {"bytes", store->device_bytes()},
                              {"upload_s", store->upload_stats().seconds},
                              {"upload_gbps", store->upload_stats().bytes / 1e9 / store->upload_stats().seconds},
                              {"load_s", load_s}}},
                 {"gpu_memory", {{"weights_gb", store->device_bytes() / 1e9},
                                 {"workspace_gb", gpu.workspace_bytes() / 1e9},
                                 {"used_gb", (free0 - free1) / 1e9}, {"context", context}}},
                 {"decode", json::array()},
                 {"prefill", json::array()}};

  hearth::SamplingParams greedy;
  greedy.temperature = 0;
  for (int ctx : decode_ctx) {
    auto prompt = tokens(ctx, c.vocab, 17);
    gpu.forward(prompt, 0);
    hearth::SampledToken s = gpu.sample(greedy, {}, 0);
    int pos = ctx;
    for (int i = 0; i < 8; ++i) {  // warm up (graph capture)
      gpu.forward(std::span(&s.token, 1), pos++);
      s = gpu.sample(greedy, {}, 0);
    }
    // Rewind to ctx so every measurement decodes positions ctx .. ctx + n.
    pos = ctx;
    const auto t = Clock::now();
    for (int i = 0; i < decode_tokens; ++i) {
      gpu.forward(std::span(&s.token, 1), pos++);
      s = gpu.sample(greedy, {}, 0);
    }
    const double secs = seconds_since(t);
    const double tps = decode_tokens / secs;
    const double avg_ctx = ctx + decode_tokens / 2.0;
    const double bytes = weight_bytes_per_token + kv_bytes_per_position * avg_ctx;
    const double gbps = bytes * tps / 1e9;
    report["decode"].push_back({{"context", ctx}, {"tokens", decode_tokens}, {"tokens_per_s", tps},
                                {"ms_per_token", 1e3 / tps}, {"bytes_per_token", bytes}, {"gbps", gbps},
                                {"fraction_of_copy_bandwidth", gbps / copy_gbps}});
    std::fprintf(stderr, "bench: decode ctx %5d: %8.1f tok/s  %7.1f GB/s  %5.1f%% of %.0f GB/s\n", ctx, tps,
                 gbps, 100 * gbps / copy_gbps, copy_gbps);
  }

  for (int n : prefill_lens) {
    auto prompt = tokens(n, c.vocab, 91);
    std::vector<double> times, ttfts;
    for (int r = 0; r < repeats + 1; ++r) {
      const auto t = Clock::now();
      gpu.forward(prompt, 0);
      gpu.sample(greedy, {}, 0);  // synchronises: the first token exists
      const double secs = seconds_since(t);
      if (r > 0) times.push_back(secs);  // the first run makes the GEMM plans
    }
    std::sort(times.begin(), times.end());
    const double secs = times[times.size() / 2];
    const double attn_flops = 4.0 * c.n_layers * c.n_heads * c.head_dim * (double(n) * (n + 1) / 2);
    const double flops = double(matmul_flops_per_token) * n + attn_flops;
    const double tflops = flops / secs / 1e12;
    report["prefill"].push_back({{"tokens", n}, {"seconds", secs}, {"tokens_per_s", n / secs},
                                 {"time_to_first_token_ms", secs * 1e3}, {"tflops", tflops},
                                 {"fraction_of_matmul_rate", tflops / matmul_tflops}});
    std::fprintf(stderr, "bench: prefill %5d: %9.0f tok/s  TTFT %7.2f ms  %6.1f TFLOP/s  %5.1f%% of %.0f\n", n,
                 n / secs, secs * 1e3, tflops, 100 * tflops / matmul_tflops, matmul_tflops);
  }

  // The table, then the JSON.
  std::printf("| model | phase | size | tok/s | ms | achieved | of ceiling |\n|---|---|---|---|---|---|---|\n");
  for (const json& d : report["decode"])
    std::printf("| %s | decode | ctx %d | %.1f | %.2f/token | %.0f GB/s | %.1f%% |\n", label.c_str(),
                d["context"].get<int>(), d["tokens_per_s"].get<double>(), d["ms_per_token"].get<double>(),
                d["gbps"].get<double>(), 100 * d["fraction_of_copy_bandwidth"].get<double>());
  for (const json& p : report["prefill"])
    std::printf("| %s | prefill | %d tokens | %.0f | %.2f TTFT | %.0f TFLOP/s | %.1f%% |\n", label.c_str(),
                p["tokens"].get<int>(), p["tokens_per_s"].get<double>(), p["time_to_first_token_ms"].get<double>(),
                p["tflops"].get<double>(), 100 * p["fraction_of_matmul_rate"].get<double>());
  std::printf("%s\n", report.dump().c_str());
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) throw std::runtime_error(json_path + ": cannot write");
    std::fprintf(f, "%s\n", report.dump(2).c_str());
    std::fclose(f);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearth-bench: error: %s\n", e.what());
    return 1;
  }
}
