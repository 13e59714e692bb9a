// The batched CUDA engine on fp8 weights (issue 25): a synthetic FP8-dynamic checkpoint
// (hearth-synth --dtype fp8) bound in place with fp32 row scales, its logits close to the CPU
// engine's on the same codes, and batch invariance end to end as in bf16: every request's
// tokens and logprobs are bit-identical alone or among others, however its prompt is chunked,
// with graphs on or off. The single-sequence engine refuses fp8 by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <map>
#include <random>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "kernels/fp8_matmul.h"
#include "kernels/fp8_support.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/error_of.h"
#include "tests/worker/engine/batch_engine_options.h"
#include "tests/worker/engine/engine_outcomes.h"
#include "tests/worker/engine/mixed_requests.h"
#include "tests/worker/engine/synth_models.h"
#include "tests/worker/engine/teacher_forced.h"
#include "tools/synth_model.h"
#include "weight-server/model/device_store.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/cuda/cuda_backend.h"
#include "worker/engine/cuda/cuda_batch_backend.h"
#include "worker/engine/cuda/cuda_weights.h"
#include "worker/engine/engine.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// fp8 runs on compute capability 9.0 only: elsewhere these tests skip; there, a build without
// the fp8 kernels' sm_90a code fails rather than skips.
bool fp8_device() {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (!kernels::fp8_matmul_refusal(major, minor).empty()) return false;
  EXPECT_TRUE(kernels::fp8_matmul_available()) << "an sm_90 GPU, but no fp8 kernels in the build";
  return true;
}
#define HEARTH_REQUIRE_FP8() \
  HEARTH_REQUIRE_GPU();      \
  if (!fp8_device()) GTEST_SKIP() << "fp8 weights run on compute capability 9.0 only"

fs::path synth_fp8(const std::string& name, const json& overrides = test::small_gqa_config()) {
  SynthOptions opt = test::synth_options("tiny-llama3", overrides);
  opt.fp8 = true;
  return test::synth_dir("cuda_fp8_" + name, opt);
}

// The same codes with one scale per tensor (the first row's; compressed-tensors strategy
// "tensor"): the model it makes is codes x that scale, whatever the codes were quantized by.
void make_per_tensor(const fs::path& dir) {
  const fs::path file = dir / "model.safetensors";
  std::string image;
  {
    std::ifstream in(file, std::ios::binary);
    image.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t len = 0;
  std::memcpy(&len, image.data(), 8);
  json header = json::parse(image.substr(8, len));
  const std::string data = image.substr(8 + len);
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [name, t] : header.items())
    if (name != "__metadata__") order.emplace_back(t["data_offsets"][0].get<uint64_t>(), name);
  std::sort(order.begin(), order.end());
  std::string out_data;
  for (const auto& [begin, name] : order) {
    json& t = header[name];
    const uint64_t end = t["data_offsets"][1].get<uint64_t>();
    std::string bytes = data.substr(begin, end - begin);
    if (name.ends_with("_scale")) {
      ASSERT_EQ(t["dtype"], "F32") << name;
      bytes.resize(4);
      t["shape"] = {1};
    }
    t["data_offsets"] = {out_data.size(), out_data.size() + bytes.size()};
    out_data += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  len = h.size();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << h << out_data;
  out.close();
  json config = json::parse(std::ifstream(dir / "config.json"));
  config["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
  std::ofstream(dir / "config.json") << config.dump(2);
}

EngineOptions options(int max_batch_tokens = 2048, int max_running = 128,
                      int64_t pool_tokens = 1 << 17) {
  return test::batch_engine_options(max_batch_tokens, max_running, pool_tokens);
}

using test::error_of;

// ---- Binding ---------------------------------------------------------------------------------

// The codes are the store's own bytes (never copied); each projection has one fp32 scale per
// output row, the checkpoint's values; the LM head stays 16-bit.
TEST(CudaFp8, BindsCodesInPlaceWithTheCheckpointsRowScales) {
  HEARTH_REQUIRE_FP8();
  auto hf = std::make_shared<HfModel>(HfModel::open(synth_fp8("bind")));
  ASSERT_TRUE(hf->config().quantization.fp8());
  const std::shared_ptr<const WeightStore> dev = DeviceStore::upload(*hf, {});
  const CudaWeights cw = CudaWeights::bind(*dev, dev->config());
  ASSERT_TRUE(cw.fp8());
  const ModelWeights on_device = bind_weights(*dev);
  const HostStore host(hf);
  const ModelWeights on_host = bind_weights(host);
  for (int l = 0; l < cw.num_layers(); ++l) {
    const CudaLayerWeights& L = cw.layer(l);
    const CudaLayerScales& S = cw.scales(l);
    const LayerWeights& D = on_device.layers[l];
    const LayerWeights& H = on_host.layers[l];
    const std::tuple<const void*, const float*, const WeightRef*, const WeightRef*> projections[] =
        {{L.wq, S.wq, &D.wq, &H.wq},
         {L.wk, S.wk, &D.wk, &H.wk},
         {L.wv, S.wv, &D.wv, &H.wv},
         {L.wo, S.wo, &D.wo, &H.wo},
         {L.w_gate, S.w_gate, &D.w_gate, &H.w_gate},
         {L.w_up, S.w_up, &D.w_up, &H.w_up},
         {L.w_down, S.w_down, &D.w_down, &H.w_down}};
    for (const auto& [codes, scales, device_ref, host_ref] : projections) {
      EXPECT_EQ(device_ref->dtype, DType::F8_E4M3) << device_ref->name;
      EXPECT_EQ(codes, device_ref->data) << device_ref->name << " was copied";
      std::vector<float> got(size_t(host_ref->rows));
      ASSERT_EQ(cudaMemcpy(got.data(), scales, got.size() * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (int64_t r = 0; r < host_ref->rows; ++r)
        ASSERT_EQ(got[r], host_ref->row_scale(r)) << host_ref->name << " row " << r;
    }
    EXPECT_EQ(S.attn_norm, nullptr);
  }
  EXPECT_EQ(cw.type(), kernels::Half::BF16);
  EXPECT_EQ(on_device.lm_head.dtype, DType::BF16);
}

// A per-tensor scale becomes the same fp32 value on every row.
TEST(CudaFp8, RepeatsAPerTensorScaleOnEveryRow) {
  HEARTH_REQUIRE_FP8();
  const fs::path dir = synth_fp8("tensor");
  make_per_tensor(dir);
  auto hf = std::make_shared<HfModel>(HfModel::open(dir));
  ASSERT_EQ(hf->config().quantization.strategy, QuantizationConfig::Strategy::Tensor);
  const std::shared_ptr<const WeightStore> dev = DeviceStore::upload(*hf, {});
  const CudaWeights cw = CudaWeights::bind(*dev, dev->config());
  const HostStore host(hf);
  const ModelWeights on_host = bind_weights(host);
  for (int l = 0; l < cw.num_layers(); ++l)
    for (const auto& [scales, ref] : {std::pair{cw.scales(l).wq, &on_host.layers[l].wq},
                                      {cw.scales(l).w_up, &on_host.layers[l].w_up},
                                      {cw.scales(l).w_down, &on_host.layers[l].w_down}}) {
      ASSERT_EQ(ref->scale_count, 1) << ref->name;
      std::vector<float> got(size_t(ref->rows));
      ASSERT_EQ(cudaMemcpy(got.data(), scales, got.size() * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (int64_t r = 0; r < ref->rows; ++r)
        ASSERT_EQ(got[r], ref->row_scale(0)) << ref->name << " row " << r;
    }
}

TEST(CudaFp8, SingleSequenceEngineRefusesFp8ByName) {
  HEARTH_REQUIRE_GPU();  // anywhere: it refuses before it looks for the fp8 kernels
  auto hf = std::make_shared<HfModel>(HfModel::open(synth_fp8("single")));
  const std::shared_ptr<const WeightStore> dev = DeviceStore::upload(*hf, {});
  EngineOptions o = options(2048, 4, 4096);
  o.backend = BackendKind::Cuda;
  o.cuda_engine = CudaEngineKind::Single;
  const std::string why = error_of([&] { make_backend(o, EngineWeights{dev, nullptr}); });
  EXPECT_NE(why.find("cuda_engine \"single\" does not run fp8 weights"), std::string::npos) << why;
}

// ---- Against the CPU engine on the same codes -----------------------------------------------

// Teacher-forced: the prompt, then `steps` tokens of the CPU's argmax, into both backends. The
// GPU quantizes its 16-bit activations where the CPU quantizes fp32 ones, so a few codes
// differ by one step: logits agree within 6% of their range (a wrong scale, layout or operand
// is off by the whole range), and the argmax wherever the CPU's margin is twice that. Returns
// the worst error over the range, for the log.
double check_against_cpu(const fs::path& dir, const std::vector<int32_t>& prompt, int steps,
                         EngineOptions o, const std::string& what) {
  auto hf = std::make_shared<HfModel>(HfModel::open(dir));
  const int context = int(prompt.size()) + steps + 8;
  CpuBackend cpu(std::make_shared<HostStore>(hf), context);
  o.kv_pool_tokens = context;
  CudaBatchBackend gpu(DeviceStore::upload(*hf, {}), o, context);
  const double worst = test::check_teacher_forced(cpu, gpu, prompt, steps, 6e-2, what).worst;
  std::printf("%s: worst |gpu - cpu| / logit range %.4f\n", what.c_str(), worst);
  return worst;
}

// A 600-token prompt (crosses an attention split) prefilled whole and in chunks of 64, then
// 20 decode steps; and batch_invariant: false, which runs the same fp8 projections.
TEST(CudaFp8, MatchesTheCpuEngineOnTheSameFp8Weights) {
  HEARTH_REQUIRE_FP8();
  const fs::path dir = synth_fp8("cpu");
  std::vector<int32_t> prompt(600);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919) % 2999);
  check_against_cpu(dir, prompt, 20, options(), "whole prompt");
  check_against_cpu(dir, prompt, 20, options(64), "chunks of 64");
  EngineOptions o = options(256);
  o.batch_invariant = false;
  check_against_cpu(dir, prompt, 10, o, "batch_invariant false");
  const fs::path tensor = synth_fp8("cpu_tensor");
  make_per_tensor(tensor);
  check_against_cpu(tensor, prompt, 10, options(), "per-tensor scales");
}

// ---- Batch invariance through the engine ----------------------------------------------------

// test::mixed_requests (prompts of 1 .. 700 tokens): greedy, top-p and the whole vocabulary.
std::vector<Request> mixed_requests(int n, int vocab) {
  std::vector<SamplingParams> kinds(3);
  kinds[0].temperature = 0;
  kinds[1].temperature = 0.8f, kinds[1].top_p = 0.9f;
  kinds[2].temperature = 1.2f;
  return test::mixed_requests(n, vocab, 4321 + n, kinds);
}

class CudaFp8Engine : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::have_gpu()) return;
    hf_ = new std::shared_ptr<HfModel>(std::make_shared<HfModel>(HfModel::open(synth_fp8("e"))));
    dev_ = new std::shared_ptr<const WeightStore>(DeviceStore::upload(**hf_, {}));
  }
  static void TearDownTestSuite() {
    delete dev_;
    delete hf_;
    dev_ = nullptr;
    hf_ = nullptr;
  }
  static constexpr int kContext = 1024;
  std::unique_ptr<CudaBatchBackend> backend(const EngineOptions& o) {
    return std::make_unique<CudaBatchBackend>(*dev_, o, kContext);
  }
  static inline std::shared_ptr<HfModel>* hf_ = nullptr;
  static inline std::shared_ptr<const WeightStore>* dev_ = nullptr;
};

// Each request alone (prefilled whole) == 1, 7 and 40 together with prompts chunked by a
// budget of 256 tokens (prompt chunks sharing steps with decodes, decode graphs replayed).
TEST_F(CudaFp8Engine, BatchedEqualsAloneBitForBit) {
  HEARTH_REQUIRE_FP8();
  const std::vector<Request> all = mixed_requests(40, 3000);
  const std::map<std::string, test::EngineOutcome> want =
      test::run_each_alone(*backend(options()), options(), all);
  const EngineOptions o = options(256, 64);
  auto b = backend(o);
  test::expect_together_equals_alone(*b, o, all, want, {1, 7, 40});
  EXPECT_GT(b->decode_graphs(), 0);
}

// Budgets of 16 and 2048 tokens a step (every chunking of the prompts), graphs off, tuned
// tilings (the LM head's): the same bits.
TEST_F(CudaFp8Engine, ChunkingGraphsAndTuningDoNotChangeBits) {
  HEARTH_REQUIRE_FP8();
  const std::vector<Request> requests = mixed_requests(24, 3000);
  const EngineOptions wide = options(2048, 64);
  const std::map<std::string, test::EngineOutcome> want =
      test::run_engine(*backend(wide), wide, requests);
  for (int budget : {16, 100}) {
    const EngineOptions narrow = options(budget, 64);
    test::expect_same_outcomes(test::run_engine(*backend(narrow), narrow, requests), want,
                               "max_batch_tokens " + std::to_string(budget));
  }
  EngineOptions eager = wide;
  eager.cuda_graphs = false;
  test::expect_same_outcomes(test::run_engine(*backend(eager), eager, requests), want,
                             "cuda_graphs off");
  EngineOptions tuned = wide;
  tuned.matmul_tiling = MatmulTiling::Tuned;
  test::expect_same_outcomes(test::run_engine(*backend(tuned), tuned, requests), want,
                             "matmul_tiling tuned");
}

}  // namespace
}  // namespace hearth
