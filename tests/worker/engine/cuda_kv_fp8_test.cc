// The batched CUDA engine with an fp8 KV cache (issue 25, kv_cache_dtype fp8_e4m3) on a 16-bit
// synthetic model: logits close to the CPU engine's with the same option, every request's tokens
// and logprobs bit-identical alone or among others however its prompt is chunked, a pool of
// about twice the blocks in the same bytes, and the single-sequence engine refusing it by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "tests/kernels/gpu_test_util.h"
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
#include "worker/engine/cuda/cuda_batch_backend.h"
#include "worker/engine/engine.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr KvCacheDtype kFp8 = KvCacheDtype::Fp8E4m3;

fs::path synth(const std::string& name) {
  return test::synth_dir("cuda_kv_fp8_" + name,
                         test::synth_options("tiny-llama3", test::small_gqa_config()));
}

EngineOptions options(int max_batch_tokens = 2048, int max_running = 128,
                      int64_t pool_tokens = 1 << 17) {
  EngineOptions o = test::batch_engine_options(max_batch_tokens, max_running, pool_tokens);
  o.kv_cache_dtype = kFp8;
  return o;
}

// Teacher-forced, as the fp8 weights' test: the prompt, then `steps` of the CPU's argmax into
// both. The GPU quantizes rows it computed in its own order (a code may differ by one step)
// and rounds what it reads back to bf16, so logits agree within 6% of their range (a wrong
// scale or layout is off by the whole range), and the argmax where the CPU's margin is wide.
void check_against_cpu(const fs::path& dir, const std::vector<int32_t>& prompt, int steps,
                       EngineOptions o, const std::string& what) {
  auto hf = std::make_shared<HfModel>(HfModel::open(dir));
  const int context = int(prompt.size()) + steps + 8;
  CpuBackend cpu(std::make_shared<HostStore>(hf), context, {}, nullptr, 1, {}, kFp8);
  o.kv_pool_tokens = context;
  CudaBatchBackend gpu(DeviceStore::upload(*hf, {}), o, context);
  const double worst = test::check_teacher_forced(cpu, gpu, prompt, steps, 6e-2, what).worst;
  std::printf("%s: worst |gpu - cpu| / logit range %.4f\n", what.c_str(), worst);
}

TEST(CudaKvFp8, MatchesTheCpuEngineWithAnFp8Cache) {
  HEARTH_REQUIRE_GPU();
  const fs::path dir = synth("cpu");
  std::vector<int32_t> prompt(600);  // crosses an attention split
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919) % 2999);
  check_against_cpu(dir, prompt, 20, options(), "whole prompt");
  check_against_cpu(dir, prompt, 20, options(64), "chunks of 64");
}

// Per token and KV head, head_dim codes + a 4-byte scale instead of head_dim 16-bit values: the
// same kv_pool_gb holds 2 x head_dim / (head_dim + 4) times the blocks.
TEST(CudaKvFp8, ThePoolHoldsAboutTwiceTheBlocks) {
  HEARTH_REQUIRE_GPU();
  auto hf = std::make_shared<HfModel>(HfModel::open(synth("pool")));
  const std::shared_ptr<const WeightStore> dev = DeviceStore::upload(*hf, {});
  const ModelConfig& c = hf->config();
  EngineOptions o = options();
  o.kv_pool_tokens = 0;
  o.kv_pool_gb = 0.05;
  const int fp8 = CudaBatchBackend(dev, o, 1024).kv_pool().num_blocks;
  o.kv_cache_dtype = KvCacheDtype::Auto;
  const int half = CudaBatchBackend(dev, o, 1024).kv_pool().num_blocks;
  const double bytes = 0.05 * double(1ull << 30);
  auto blocks = [&](int64_t per_token) {
    return (int64_t(bytes / double(per_token)) + o.kv_block_size - 1) / o.kv_block_size;
  };
  EXPECT_EQ(CudaBatchBackend::kv_bytes_per_token(c, kFp8),
            int64_t(c.n_layers) * 2 * c.n_kv_heads * (c.head_dim + 4));
  EXPECT_EQ(fp8, blocks(CudaBatchBackend::kv_bytes_per_token(c, kFp8)));
  EXPECT_EQ(half, blocks(CudaBatchBackend::kv_bytes_per_token(c)));
  EXPECT_GE(double(fp8), 1.8 * half);
}

TEST(CudaKvFp8, SingleSequenceEngineRefusesItByName) {
  HEARTH_REQUIRE_GPU();
  auto hf = std::make_shared<HfModel>(HfModel::open(synth("single")));
  const std::shared_ptr<const WeightStore> dev = DeviceStore::upload(*hf, {});
  EngineOptions o = options(2048, 4, 4096);
  o.backend = BackendKind::Cuda;
  o.cuda_engine = CudaEngineKind::Single;
  std::string why = "no error";
  try {
    make_backend(o, EngineWeights{dev, nullptr});
  } catch (const std::exception& e) {
    why = e.what();
  }
  EXPECT_NE(why.find("kv_cache_dtype fp8_e4m3 needs the batched cuda engine"), std::string::npos)
      << why;
}

// test::mixed_requests (prompts of 1 .. 700 tokens), greedy and top-p.
std::vector<Request> mixed_requests(int n, int vocab) {
  std::vector<SamplingParams> kinds(2);
  kinds[0].temperature = 0;
  kinds[1].temperature = 0.8f, kinds[1].top_p = 0.9f;
  return test::mixed_requests(n, vocab, 977 + n, kinds);
}

// Every token's top_logprobs entries of `r` run alone.
std::vector<TokenLogprob> top_logprobs(Backend& backend, const EngineOptions& o, const Request& r) {
  Engine engine(backend, o, nullptr, {});
  engine.submit(r);
  std::vector<TokenLogprob> top;
  while (engine.has_work())
    for (const RequestOutput& step : engine.step())
      for (const TokenOutput& t : step.tokens)
        top.insert(top.end(), t.top_logprobs.begin(), t.top_logprobs.end());
  EXPECT_FALSE(top.empty());
  return top;
}

// Each request alone (prefilled whole) == 1, 7 and 40 together with prompts chunked by a
// budget of 256 tokens (chunks beside decodes, decode graphs replayed), and with graphs off and
// a budget of 16: the same bits.
TEST(CudaKvFp8, BatchedAndChunkedEqualAloneBitForBit) {
  HEARTH_REQUIRE_GPU();
  auto hf = std::make_shared<HfModel>(HfModel::open(synth("engine")));
  const std::shared_ptr<const WeightStore> dev = DeviceStore::upload(*hf, {});
  const std::vector<Request> all = mixed_requests(40, 3000);
  std::map<std::string, test::EngineOutcome> want;
  {
    const EngineOptions o = options();
    CudaBatchBackend b(dev, o, 1024);
    want = test::run_each_alone(b, o, all);
  }
  {
    const EngineOptions o = options(256, 64);
    CudaBatchBackend b(dev, o, 1024);
    test::expect_together_equals_alone(b, o, all, want, {1, 7, 40});
    EXPECT_GT(b.decode_graphs(), 0);
  }
  EngineOptions o = options(16, 64);
  o.cuda_graphs = false;
  CudaBatchBackend b(dev, o, 1024);
  test::expect_together_equals_alone(b, o, all, want, {12});
  // And the cache was fp8: the 16-bit cache gives other top-5 logprobs (the chosen token's
  // logprob of this synthetic model rounds to 0 either way, so the runner-up ones tell).
  Request probe = all[3];
  probe.settings.logprobs = 5;
  EngineOptions plain = options();
  plain.kv_cache_dtype = KvCacheDtype::Auto;
  CudaBatchBackend p(dev, plain, 1024);
  EXPECT_NE(top_logprobs(p, plain, probe), top_logprobs(b, o, probe));
}

}  // namespace
}  // namespace hearth
