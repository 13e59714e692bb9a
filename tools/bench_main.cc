// hearth-bench: decode and prefill speed of the CUDA engine on a model directory, against the
// hardware ceilings (device-to-device copy bandwidth for decode, dense bf16 matmul rate for
// prefill). Prints a table and one JSON object with the machine, model and settings. Other
// modes: --batch-kernels (the continuous-batching kernels alone), --serve-bench (the batched
// engine serving many requests at once, bench_serve.h) and --serve-bench --shared-prefix (what
// prefix caching buys and costs, bench_prefix.h).
#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ipc/cli_values.h"
#include "ipc/main_guard.h"
#include "weight-server/model/device_store.h"
#include "weight-server/model/hf_model.h"
#include "kernels/device_buffer.h"
#include "kernels/ops.h"
#include "tools/bench_batch_kernels.h"
#include "tools/bench_prefix.h"
#include "tools/bench_mixed.h"
#include "tools/bench_serve.h"
#include "tools/copy_bandwidth.h"
#include "worker/engine/cuda/cuda_backend.h"
#include "worker/engine/profile.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

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
  const uint64_t per_layer =
      h * c.q_dim() + 2 * h * c.kv_dim() + uint64_t(c.q_dim()) * h + 3 * h * c.intermediate;
  return per_layer * c.n_layers + h * c.vocab;  // + LM head
}

std::vector<int32_t> tokens(int n, int vocab, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i)
    t[i] = int32_t((uint64_t(i) * 2654435761u + salt) % uint64_t(vocab - 1)) + 1;
  return t;
}

// Each decode kernel class alone, over every layer's weights in turn (so nothing is served from
// L2), in the order and with the launch mode the engine uses: achieved GB/s per class and GEMV
// split, and decode attention per context. Tells where a decode step's time goes.
json kernel_bench(const hearth::WeightStore& store, int max_context) {
  using hearth::kernels::GemvArgs;
  using hearth::kernels::GemvEpilogue;
  const hearth::ModelConfig& c = store.config();
  const auto type = store.at("model.embed_tokens.weight").info.dtype == hearth::DType::BF16
                        ? hearth::kernels::Half::BF16
                        : hearth::kernels::Half::F16;
  const int h = c.hidden, L = c.n_layers;
  const size_t big = std::max<size_t>({size_t(c.vocab), size_t(c.intermediate), size_t(c.q_dim())});
  hearth::DeviceBuffer x(h * 4), norm(h * 4), x16(big * 2), out(big * 4), out2(big * 4),
      out3(big * 4), act(big * 2), q16(c.q_dim() * 2), pos(4);
  std::vector<float> ones(h, 1.0f), xv(h);
  for (int i = 0; i < h; ++i) xv[i] = float((i * 37) % 17) / 17.0f - 0.5f;
  cudaMemcpy(x.get(), xv.data(), h * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(norm.get(), ones.data(), h * 4, cudaMemcpyHostToDevice);
  cudaMemset(x16.get(), 0x3c, big * 2);
  cudaMemset(pos.get(), 0, 4);
  const size_t layer_cache = size_t(c.n_kv_heads) * max_context * c.head_dim * 2;
  hearth::DeviceBuffer kc(layer_cache * L), vc(layer_cache * L);
  cudaMemset(kc.get(), 0x3c, kc.bytes());
  cudaMemset(vc.get(), 0x3c, vc.bytes());
  const std::vector<float> inv = hearth::rope_inverse_frequencies(c);
  hearth::DeviceBuffer inv_freq(inv.size() * 4);
  cudaMemcpy(inv_freq.get(), inv.data(), inv.size() * 4, cudaMemcpyHostToDevice);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto w = [&](int l, const char* name) {
    return store.at("model.layers." + std::to_string(l) + "." + name).data;
  };
  auto time_ms = [&](auto&& body) {
    body();  // warm up
    std::vector<float> ms;
    for (int r = 0; r < 5; ++r) {
      cudaEventRecord(e0, stream);
      body();
      cudaEventRecord(e1, stream);
      cudaEventSynchronize(e1);
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return double(ms[2]);
  };
  json result = json::array();
  struct Class {
    const char* name;
    GemvEpilogue epilogue;
    bool norm;
  };
  const Class classes[] = {{"qkv_rope", GemvEpilogue::QkvRope, true},
                           {"o_proj", GemvEpilogue::Accumulate, false},
                           {"gate_up", GemvEpilogue::SwiGLU, true},
                           {"down_proj", GemvEpilogue::Accumulate, false},
                           {"lm_head", GemvEpilogue::Store, true}};
  for (const Class& k : classes) {
    for (int split : {0, 1, 2, 4, 8}) {
      double bytes = 0;
      auto args = [&](int l) {
        GemvArgs a;
        a.split = split;
        if (k.norm)
          a.x_norm = x.get<float>(), a.norm_weight = norm.get<float>(), a.eps = 1e-5f;
        else
          a.x = x16.get();
        const std::string name = k.name;
        a.prefetch = name == "qkv_rope" || name == "o_proj";  // as the engine launches them
        if (name == "qkv_rope") {
          a.w[0] = w(l, "self_attn.q_proj.weight"), a.w[1] = w(l, "self_attn.k_proj.weight"),
          a.w[2] = w(l, "self_attn.v_proj.weight");
          a.rows[0] = c.q_dim(), a.rows[1] = c.kv_dim(), a.rows[2] = c.kv_dim(), a.k = h;
          a.inv_freq = inv_freq.get<float>(), a.pos = pos.get<int>(), a.head_dim = c.head_dim,
          a.context = max_context;
          a.q_out = q16.get(), a.k_cache = kc.get<char>() + l * layer_cache,
          a.v_cache = vc.get<char>() + l * layer_cache;
        } else if (name == "o_proj") {
          a.w[0] = w(l, "self_attn.o_proj.weight"), a.rows[0] = h, a.out[0] = out.get<float>(),
          a.k = c.q_dim();
        } else if (name == "gate_up") {
          a.w[0] = w(l, "mlp.gate_proj.weight"), a.w[1] = w(l, "mlp.up_proj.weight"),
          a.rows[0] = c.intermediate;
          a.act = act.get(), a.k = h;
        } else if (name == "down_proj") {
          a.w[0] = w(l, "mlp.down_proj.weight"), a.rows[0] = h, a.out[0] = out.get<float>(),
          a.k = c.intermediate;
        } else {
          a.w[0] = c.tie_embeddings ? store.at("model.embed_tokens.weight").data
                                    : store.at("lm_head.weight").data;
          a.rows[0] = c.vocab, a.out[0] = out.get<float>(), a.k = h;
        }
        return a;
      };
      const int layers = std::string(k.name) == "lm_head" ? 1 : L;
      for (int l = 0; l < layers; ++l) {
        const GemvArgs a = args(l);
        const int n = k.epilogue == GemvEpilogue::SwiGLU ? 2 : 1;
        bytes += double(a.rows[0] * n + a.rows[1] + a.rows[2]) * a.k * 2;
      }
      const double ms = time_ms([&] {
        for (int l = 0; l < layers; ++l) hearth::kernels::gemv(type, k.epilogue, args(l), stream);
      });
      result.push_back({{"kernel", k.name},
                        {"split", split},
                        {"launches", layers},
                        {"us_per_launch", 1e3 * ms / layers},
                        {"gbps", bytes / ms / 1e6}});
      std::fprintf(stderr, "kernels: %-9s split %d: %7.1f us/launch %7.1f GB/s\n", k.name, split,
                   1e3 * ms / layers, bytes / ms / 1e6);
    }
  }
  hearth::DeviceBuffer scratch(
      hearth::kernels::decode_attention_scratch_floats(c.n_heads, c.head_dim, max_context) * 4);
  hearth::DeviceBuffer counters(c.n_kv_heads * 4);
  cudaMemset(counters.get(), 0, counters.bytes());
  for (int ctx : {128, 2048, 8192}) {
    if (ctx >= max_context) continue;
    cudaMemcpy(pos.get(), &ctx, 4, cudaMemcpyHostToDevice);
    const double ms = time_ms([&] {
      for (int l = 0; l < L; ++l) {
        hearth::kernels::DecodeAttentionArgs a;
        a.q = q16.get(), a.k_cache = kc.get<char>() + l * layer_cache,
        a.v_cache = vc.get<char>() + l * layer_cache;
        a.pos = pos.get<int>(), a.n_heads = c.n_heads, a.n_kv_heads = c.n_kv_heads,
        a.head_dim = c.head_dim;
        a.context = max_context, a.scale = 0.1f, a.partial = scratch.get<float>(),
        a.counters = counters.get<unsigned>();
        a.out = act.get();
        hearth::kernels::attention_decode(type, a, stream);
      }
    });
    const double bytes = double(L) * (ctx + 1) * c.kv_dim() * 2 * 2;
    result.push_back({{"kernel", "attention_decode"},
                      {"context", ctx},
                      {"us_per_launch", 1e3 * ms / L},
                      {"gbps", bytes / ms / 1e6}});
    std::fprintf(stderr, "kernels: attention ctx %5d: %7.1f us/launch %7.1f GB/s\n", ctx,
                 1e3 * ms / L, bytes / ms / 1e6);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
  return result;
}

int run(int argc, char** argv) {
  CLI::App app{"hearth-bench: CUDA engine decode/prefill speed against the hardware ceilings"};
  std::string model_dir, decode_list = "128,2048,8192", prefill_list = "512,2048,8192", json_path,
                         layout = "per-tensor";
  std::string label;
  int decode_tokens = 128, repeats = 3;
  double copy_gbps = 0, matmul_tflops = 796;  // copy_gbps 0: measured where a roofline needs it
  std::vector<std::string> settings;
  app.add_option("--model", model_dir, "model directory (not needed with --batch-kernels)");
  app.add_option("--label", label, "model label in the report (default: directory name)");
  app.add_option("--decode-contexts", decode_list,
                 "contexts to decode at (tokens already in the cache)");
  app.add_option("--decode-tokens", decode_tokens, "tokens decoded per measurement")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--prefill", prefill_list, "prompt lengths to prefill");
  app.add_option("--repeats", repeats, "prefill repetitions (median reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--weights-layout", layout, "per-tensor | packed")
      ->check(CLI::IsMember({"per-tensor", "packed"}));
  app.add_option("--set", settings, "profile key=value (repeatable)");
  const CLI::Validator finite([](std::string& s) { return hearth::finite_number_error(s); },
                              "NUMBER");
  app.add_option("--copy-gbps", copy_gbps,
                 "decode ceiling: device-to-device copy bandwidth, GB/s (default: measured, a "
                 "1 GiB copy on this GPU; 3020 is an H100 SXM's)")
      ->check(finite)
      ->check(CLI::PositiveNumber);
  app.add_option("--matmul-tflops", matmul_tflops,
                 "prefill ceiling: dense bf16 matmul rate, TFLOP/s")
      ->check(finite)
      ->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "also write the JSON report here");
  bool kernels = false;
  app.add_flag("--kernels", kernels,
               "also time each decode kernel class alone (GB/s per GEMV split)");
  bool batch_kernels = false, all_tiles = false;
  app.add_flag("--batch-kernels", batch_kernels,
               "instead: time the continuous-batching kernels on synthetic 8B shapes");
  app.add_flag("--all-tiles", all_tiles, "with --batch-kernels: also each forced matmul tiling");
  std::string batch_ms, attention_step;
  app.add_option("--attention-step", attention_step,
                 "with --batch-kernels: only the attention steps whose name contains this (e.g. "
                 "\"2k at 4k\", to profile one step)");
  app.add_option("--batch-m", batch_ms, "with --batch-kernels: matmul row counts (a,b,...)");
  bool sampling_only = false;
  app.add_flag("--sampling-only", sampling_only, "with --batch-kernels: only the sampling table");
  bool serve = false;
  std::string concurrency = "1,8,32,64,128,256";
  int prompt_tokens = 128, output_tokens = 256;
  float temperature = 0;
  app.add_flag("--serve-bench", serve,
               "instead: the batched engine serving --concurrency levels of a fixed workload");
  app.add_option("--concurrency", concurrency, "with --serve-bench: requests at once (a,b,...)");
  app.add_option("--prompt-tokens", prompt_tokens, "with --serve-bench: tokens per prompt");
  app.add_option("--output-tokens", output_tokens,
                 "with --serve-bench: tokens generated each (256; 128 with --shared-prefix)");
  app.add_option("--temperature", temperature, "with --serve-bench: 0 for greedy");
  bool json_object = false;
  app.add_flag("--json-object", json_object,
               "with --serve-bench: every request asks for response_format json_object (the "
               "structured-output mask's cost; needs the model's tokenizer.json)");
  bool mixed = false;
  hearth::bench::MixedBenchOptions mixed_options;
  std::string budgets = "0,1024,512,256";
  app.add_flag("--mixed", mixed,
               "with --serve-bench: mixed lengths (prompts 16-1,024, outputs 16-512) kept "
               "--streams at a time, once per --budgets decode_step_tokens");
  app.add_option("--streams", mixed_options.streams, "with --mixed: requests at once (64)")
      ->check(CLI::PositiveNumber);
  app.add_option("--mixed-requests", mixed_options.requests, "with --mixed: requests in all (192)")
      ->check(CLI::PositiveNumber);
  app.add_option("--budgets", budgets,
                 "with --mixed: decode_step_tokens per run, 0 for off (a,b,...; 0,1024,512,256)");
  hearth::bench::PrefixBenchOptions prefix;
  hearth::bench::add_prefix_bench_flags(app, prefix);
  CLI11_PARSE(app, argc, argv);
  // The copy ceiling, measured on first use (the prefix and mixed benches have no roofline).
  const bool copy_measured = copy_gbps == 0;
  auto copy_ceiling = [&] { return copy_gbps = hearth::bench::copy_ceiling_gbps(copy_gbps); };
  auto ceilings = [&] {
    return json{{"copy_gbps", copy_gbps},
                {"copy_gbps_source", copy_measured ? "measured" : "given"},
                {"matmul_tflops", matmul_tflops}};
  };
  auto write_json = [&](const json& report) {
    if (json_path.empty()) return;
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) throw std::runtime_error(json_path + ": cannot write");
    std::fprintf(f, "%s\n", report.dump(2).c_str());
    std::fclose(f);
  };
  if (batch_kernels) {
    hearth::bench::BatchKernelBenchOptions o;
    o.copy_gbps = copy_ceiling(), o.matmul_tflops = matmul_tflops, o.all_tiles = all_tiles;
    if (!batch_ms.empty()) o.ms = parse_list(batch_ms);
    o.attention_step = attention_step;
    o.sampling_only = sampling_only;
    json report = hearth::bench::batch_kernel_bench(o);
    report["ceilings"] = ceilings();
    std::printf("%s\n", report.dump().c_str());
    write_json(report);
    return 0;
  }
  if (model_dir.empty()) throw std::runtime_error("--model is required");
  if (label.empty()) label = fs::path(model_dir).filename().string();

  hearth::Profile profile;
  for (const std::string& s : settings) hearth::apply_profile_setting(profile, s);
  if (serve && app.count("--shared-prefix") > 0) {
    prefix.model_dir = model_dir, prefix.label = label, prefix.engine = profile.engine;
    if (app.count("--output-tokens") > 0) prefix.output_tokens = output_tokens;
    prefix.machine = hearth::bench::describe_host();
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) prefix.machine["gpu"] = prop.name;
    const json report = hearth::bench::prefix_bench(prefix);
    std::printf("%s\n", report.dump().c_str());
    write_json(report);
    return 0;
  }
  if (serve && mixed) {
    hearth::bench::MixedBenchOptions& o = mixed_options;
    o.model_dir = model_dir, o.label = label, o.budgets = parse_list(budgets);
    o.temperature = temperature, o.engine = profile.engine;
    const json report = hearth::bench::mixed_bench(o);
    std::printf("%s\n", report.dump().c_str());
    write_json(report);
    return 0;
  }
  if (serve) {
    hearth::bench::ServeBenchOptions o;
    o.model_dir = model_dir, o.label = label, o.concurrency = parse_list(concurrency);
    o.prompt_tokens = prompt_tokens, o.output_tokens = output_tokens, o.temperature = temperature;
    o.copy_gbps = copy_ceiling(), o.engine = profile.engine, o.json_object = json_object;
    json report = hearth::bench::serve_bench(o);
    report["ceilings"] = ceilings();
    std::printf("%s\n", report.dump().c_str());
    write_json(report);
    return 0;
  }
  if (profile.engine.kv_cache_dtype == hearth::KvCacheDtype::Fp8E4m3)
    throw std::runtime_error(
        "hearth-bench's decode and prefill runs use the single-sequence engine, which keeps its "
        "cache 16-bit; for kv_cache_dtype fp8_e4m3 use --serve-bench (--concurrency 1 "
        "--prompt-tokens N for one stream decoding at context N)");
  const std::vector<int> decode_ctx = parse_list(decode_list),
                         prefill_lens = parse_list(prefill_list);
  int context = 1;
  for (int c : decode_ctx) context = std::max(context, c + decode_tokens + 1);
  for (int n : prefill_lens) context = std::max(context, n + 1);

  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
    throw std::runtime_error("no CUDA device was found");
  int driver = 0;
  cudaDriverGetVersion(&driver);
  char host[256] = {};
  gethostname(host, sizeof host - 1);

  copy_ceiling();  // before the upload, so the memory readings below see only the model
  std::fprintf(stderr, "bench: loading %s\n", model_dir.c_str());
  auto t0 = Clock::now();
  hearth::HfModel hf = hearth::HfModel::open(model_dir);
  if (hf.config().quantization.fp8())
    throw std::runtime_error(
        "hearth-bench's decode and prefill runs use the single-sequence engine, which reads 16-bit "
        "weights only; for an fp8 model use --serve-bench (--concurrency 1 for one stream)");
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
  hearth::CudaBackend gpu(store, profile.engine, context);
  size_t free1 = 0;
  cudaMemGetInfo(&free1, &total_mem);

  const uint64_t weight_bytes_per_token = matmul_params(c) * 2;
  const uint64_t kv_bytes_per_position =
      uint64_t(c.n_layers) * c.kv_dim() * 2 * 2;  // K and V, 16-bit
  const uint64_t matmul_flops_per_token = 2 * matmul_params(c);

  json report = {
      {"machine",
       {{"gpu", prop.name},
        {"sms", prop.multiProcessorCount},
        {"memory_gb", total_mem / 1e9},
        {"driver", driver},
        {"host", host}}},
      {"model",
       {{"label", label},
        {"architecture", c.architecture_name},
        {"parameters", c.parameter_count()},
        {"layers", c.n_layers},
        {"hidden", c.hidden},
        {"vocab", c.vocab}}},
      {"settings", hearth::profile_to_json(profile)},
      {"ceilings", ceilings()},
      {"weights",
       {{"layout", layout},
        {"bytes", store->device_bytes()},
        {"upload_s", store->upload_stats().seconds},
        {"upload_gbps", store->upload_stats().bytes / 1e9 / store->upload_stats().seconds},
        {"load_s", load_s}}},
      {"gpu_memory",
       {{"weights_gb", store->device_bytes() / 1e9},
        {"workspace_gb", gpu.workspace_bytes() / 1e9},
        {"used_gb", (free0 - free1) / 1e9},
        {"context", context}}},
      {"decode", json::array()},
      {"prefill", json::array()}};

  if (kernels) report["kernels"] = kernel_bench(*store, std::max(context, 8448));

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
    gpu.synchronize();  // the step sample() started ahead is not this measurement's
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
    report["decode"].push_back({{"context", ctx},
                                {"tokens", decode_tokens},
                                {"tokens_per_s", tps},
                                {"ms_per_token", 1e3 / tps},
                                {"bytes_per_token", bytes},
                                {"gbps", gbps},
                                {"fraction_of_copy_bandwidth", gbps / copy_gbps}});
    std::fprintf(stderr, "bench: decode ctx %5d: %8.1f tok/s  %7.1f GB/s  %5.1f%% of %.0f GB/s\n",
                 ctx, tps, gbps, 100 * gbps / copy_gbps, copy_gbps);
  }

  for (int n : prefill_lens) {
    auto prompt = tokens(n, c.vocab, 91);
    std::vector<double> times, ttfts;
    for (int r = 0; r < repeats + 1; ++r) {
      gpu.synchronize();
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
    report["prefill"].push_back({{"tokens", n},
                                 {"seconds", secs},
                                 {"tokens_per_s", n / secs},
                                 {"time_to_first_token_ms", secs * 1e3},
                                 {"tflops", tflops},
                                 {"fraction_of_matmul_rate", tflops / matmul_tflops}});
    std::fprintf(stderr,
                 "bench: prefill %5d: %9.0f tok/s  TTFT %7.2f ms  %6.1f TFLOP/s  %5.1f%% of %.0f\n",
                 n, n / secs, secs * 1e3, tflops, 100 * tflops / matmul_tflops, matmul_tflops);
  }

  // The table, then the JSON.
  std::printf(
      "| model | phase | size | tok/s | ms | achieved | of ceiling "
      "|\n|---|---|---|---|---|---|---|\n");
  for (const json& d : report["decode"])
    std::printf("| %s | decode | ctx %d | %.1f | %.2f/token | %.0f GB/s | %.1f%% |\n",
                label.c_str(), d["context"].get<int>(), d["tokens_per_s"].get<double>(),
                d["ms_per_token"].get<double>(), d["gbps"].get<double>(),
                100 * d["fraction_of_copy_bandwidth"].get<double>());
  for (const json& p : report["prefill"])
    std::printf("| %s | prefill | %d tokens | %.0f | %.2f TTFT | %.0f TFLOP/s | %.1f%% |\n",
                label.c_str(), p["tokens"].get<int>(), p["tokens_per_s"].get<double>(),
                p["time_to_first_token_ms"].get<double>(), p["tflops"].get<double>(),
                100 * p["fraction_of_matmul_rate"].get<double>());
  std::printf("%s\n", report.dump().c_str());
  write_json(report);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-bench", [&] { return run(argc, argv); });
}
