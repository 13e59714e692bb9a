// The CUDA engine against the CPU engine, end to end: every architecture variant of the HF
// golden set plus synthetic shapes that exercise the production kernel paths (head_dim 64 and
// 128, GQA, chunked prefill). Logits must agree within bf16 tolerance, greedy tokens wherever
// the CPU's top-1/top-2 margin exceeds it, and repeated runs must be byte-identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/kernels/gpu_test_util.h"
#include "tools/synth_model.h"
#include "weight-server/model/device_store.h"
#include "tests/support/paths.h"
#include "tests/worker/engine/synth_models.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/profile.h"
#include "worker/engine/cuda/cuda_backend.h"
#include "worker/engine/generator.h"
#include "base/read_file.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Engines {
  std::shared_ptr<HfModel> hf;
  std::unique_ptr<CpuBackend> cpu;
  std::unique_ptr<CudaBackend> gpu;
};

Engines open_engines(const fs::path& dir, int context, EngineOptions options = {}) {
  Engines e;
  e.hf = std::make_shared<HfModel>(HfModel::open(dir));
  e.cpu = std::make_unique<CpuBackend>(std::make_shared<HostStore>(e.hf), context);
  std::shared_ptr<const WeightStore> dev = DeviceStore::upload(*e.hf, {});
  e.gpu = std::make_unique<CudaBackend>(dev, options, context);
  return e;
}

std::vector<float> copy(std::span<const float> s) {
  return {s.begin(), s.end()};
}

struct Comparison {
  double max_err = 0, range = 0;
};
Comparison compare(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  Comparison c;
  const auto [lo, hi] = std::minmax_element(cpu.begin(), cpu.end());
  c.range = *hi - *lo;
  for (size_t i = 0; i < cpu.size(); ++i)
    c.max_err = std::max(c.max_err, double(std::abs(gpu[i] - cpu[i])));
  return c;
}

// Feeds prompt then `steps` tokens chosen by the CPU's argmax into both engines; checks logits
// and, where the CPU's margin is decisive, the GPU's argmax. Returns how many steps were decisive.
int check_teacher_forced(Engines& e, std::vector<int32_t> prompt, int steps, double rel_tol,
                         const std::string& what) {
  std::vector<float> c = copy(forward_alone(*e.cpu, prompt));
  std::vector<float> g = copy(forward_alone(*e.gpu, prompt));
  int pos = int(prompt.size()), decisive = 0;
  for (int step = 0; step <= steps; ++step) {
    const Comparison cmp = compare(g, c);
    const double tol = rel_tol * cmp.range;
    EXPECT_LE(cmp.max_err, tol) << what << " step " << step << ": max |gpu - cpu| " << cmp.max_err
                                << ", logit range " << cmp.range;
    std::vector<size_t> order(c.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                      [&](size_t a, size_t b) { return c[a] > c[b]; });
    const int32_t cpu_top = int32_t(order[0]);
    if (c[order[0]] - c[order[1]] > 2 * tol) {
      const int32_t gpu_top = int32_t(std::max_element(g.begin(), g.end()) - g.begin());
      EXPECT_EQ(gpu_top, cpu_top) << what << " step " << step;
      ++decisive;
    }
    if (step == steps) break;
    c = copy(forward_alone(*e.cpu, std::span(&cpu_top, 1), pos));
    g = copy(forward_alone(*e.gpu, std::span(&cpu_top, 1), pos));
    ++pos;
  }
  return decisive;
}

const fs::path kGoldenDir = test::source_dir() / "tests/golden/hf";

TEST(CudaEngine, MatchesCpuOnEveryGoldenVariant) {
  HEARTH_REQUIRE_GPU();
  for (const auto& entry : fs::directory_iterator(kGoldenDir)) {
    const std::string name = entry.path().filename().string();
    const json golden = json::parse(read_file(entry.path() / "golden.json"));
    Engines e = open_engines(entry.path(), 128);
    const int decisive =
        check_teacher_forced(e, golden["prompt"].get<std::vector<int32_t>>(), 40, 2e-2, name);
    EXPECT_GE(decisive, 10) << name;
  }
}

fs::path synth(const std::string& name, const json& overrides,
               const std::string& preset = "tiny-llama3") {
  return test::synth_dir("cuda_engine_" + name, test::synth_options(preset, overrides));
}

// Production-like head sizes: head_dim 128 with GQA 4, and head_dim 64 with GQA 7 and biases.
TEST(CudaEngine, MatchesCpuOnProductionHeadShapes) {
  HEARTH_REQUIRE_GPU();
  for (const auto& [name, cfg, preset] : test::production_head_shapes()) {
    Engines e = open_engines(synth(name, cfg, preset), 512);
    std::vector<int32_t> prompt(150);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919) % 1999);
    check_teacher_forced(e, prompt, 30, 2e-2, name);
  }
}

// A prompt longer than one prefill chunk (2048) goes through two chunks.
TEST(CudaEngine, ChunkedPrefillMatchesCpu) {
  HEARTH_REQUIRE_GPU();
  const json cfg = {{"hidden_size", 256},
                    {"num_attention_heads", 4},
                    {"num_key_value_heads", 2},
                    {"head_dim", 64},
                    {"intermediate_size", 512},
                    {"vocab_size", 1000},
                    {"max_position_embeddings", 4096}};
  Engines e = open_engines(synth("chunked", cfg), 4096);
  std::vector<int32_t> prompt(2100);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 104729) % 997);
  check_teacher_forced(e, prompt, 5, 2e-2, "chunked");
}

// Same profile, prompt and seed: byte-identical tokens and logprobs, graphs on or off.
TEST(CudaEngine, RepeatedRunsAreByteIdentical) {
  HEARTH_REQUIRE_GPU();
  const json cfg = {{"hidden_size", 512}, {"num_attention_heads", 4},  {"num_key_value_heads", 1},
                    {"head_dim", 128},    {"intermediate_size", 1024}, {"vocab_size", 3000}};
  const fs::path dir = synth("repeat", cfg);
  auto hf = std::make_shared<HfModel>(HfModel::open(dir));
  std::shared_ptr<const WeightStore> dev = DeviceStore::upload(*hf, {});
  for (float temperature : {0.0f, 0.9f}) {
    std::vector<int32_t> first_tokens;
    std::vector<float> first_logprobs;
    for (int run = 0; run < 5; ++run) {
      Profile p;
      p.request.sampling.temperature = temperature;
      p.request.sampling.top_p = 0.95f;
      p.request.sampling.seed = 42;
      p.request.max_tokens = 64;
      p.request.ignore_eos = true;
      p.engine.cuda_graphs = run != 4;  // the last run without graphs: same kernels, same bits
      CudaBackend gpu(dev, p.engine, 256);
      GenerationRequest req{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, p.request, {}};
      std::vector<int32_t> tokens;
      std::vector<float> logprobs;
      for (const TokenOutput& t : generate(gpu, nullptr, req).tokens) {
        tokens.push_back(t.token);
        logprobs.push_back(t.logprob);
      }
      ASSERT_EQ(tokens.size(), 64u);
      if (run == 0) {
        first_tokens = tokens;
        first_logprobs = logprobs;
      } else {
        EXPECT_EQ(tokens, first_tokens) << "temperature " << temperature << " run " << run;
        EXPECT_EQ(0,
                  std::memcmp(logprobs.data(), first_logprobs.data(), first_logprobs.size() * 4));
      }
    }
  }
}

TEST(CudaEngine, PackedAndPerTensorLayoutsGiveIdenticalLogits) {
  HEARTH_REQUIRE_GPU();
  const fs::path dir = synth("layouts", {{"vocab_size", 700}});
  auto hf = std::make_shared<HfModel>(HfModel::open(dir));
  UploadOptions packed;
  packed.layout = DeviceLayout::Packed;
  CudaBackend a(DeviceStore::upload(*hf, {}), {}, 64), b(DeviceStore::upload(*hf, packed), {}, 64);
  std::vector<int32_t> prompt = {5, 6, 7, 8};
  auto la = copy(forward_alone(a, prompt)), lb = copy(forward_alone(b, prompt));
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4));
}

}  // namespace
}  // namespace hearth
