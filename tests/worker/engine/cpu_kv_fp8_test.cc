// The fp8 KV cache on the CPU engine (issue 25, kv_cache_dtype fp8_e4m3): the per-token codec,
// logits close to the fp32 cache's, bit-identical alone, chunked and batched, and a pool that
// holds more blocks in the same bytes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "tests/worker/engine/split_sequences.h"
#include "tests/worker/engine/synth_models.h"
#include "tools/synth_model.h"
#include "weight-server/model/host_store.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/cache_domain.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/kv_fp8.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

constexpr KvCacheDtype kFp8 = KvCacheDtype::Fp8E4m3;

std::shared_ptr<const WeightStore> tiny(const std::string& preset) {
  return test::synth_host_store("cpu_kv_fp8_" + preset, test::synth_options(preset));
}

std::vector<float> copy(std::span<const float> s) {
  return {s.begin(), s.end()};
}

// A row reads back within e4m3's rounding of itself: half a step of 3 mantissa bits (2^-4
// relative) for normals, half a subnormal step (2^-10 x scale) below; its largest magnitude
// becomes the largest code.
TEST(KvFp8, RowsReadBackWithinTheCodecsRounding) {
  std::mt19937 rng(11);
  for (float spread : {1e-3f, 1.0f, 300.0f}) {
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> x(128), back(128);
    for (float& v : x) v = normal(rng);
    std::vector<uint8_t> codes(128);
    const float scale = kv_fp8_quantize(x.data(), 128, codes.data());
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    EXPECT_EQ(scale, amax / 448.0f);
    kv_fp8_dequantize(codes.data(), scale, 128, back.data());
    for (int i = 0; i < 128; ++i) {
      const float bound = std::max(std::fabs(x[i]) * 0x1p-4f, scale * 0x1p-10f) * 1.0001f;
      EXPECT_LE(std::fabs(back[i] - x[i]), bound) << i << " " << x[i] << " spread " << spread;
      if (std::fabs(x[i]) == amax) {
        EXPECT_EQ(codes[i] & 0x7f, 0x7e);  // 448
      }
    }
  }
  std::vector<float> zeros(64, 0.0f);
  std::vector<uint8_t> codes(64, 0xff);
  EXPECT_EQ(kv_fp8_quantize(zeros.data(), 64, codes.data()), 1.0f);
  EXPECT_TRUE(std::all_of(codes.begin(), codes.end(), [](uint8_t c) { return c == 0; }));
}

// The GPU kernels decode with kernels::decode_e4m3; the CPU engine with fp8_e4m3_to_f32's
// table: the same value for every code.
TEST(KvFp8, BothDecodersAgreeOnEveryCode) {
  for (int b = 0; b < 256; ++b) {
    const float table = fp8_e4m3_values()[size_t(b)], kernel = kernels::decode_e4m3(uint8_t(b));
    if (std::isnan(table)) {
      EXPECT_TRUE(std::isnan(kernel)) << b;
    } else {
      EXPECT_EQ(table, kernel) << b;
    }
  }
}

// fp8 keys and values move the logits a little, not much, and they do move (the cache is used).
TEST(CpuKvFp8, LogitsCloseToTheFp32Caches) {
  for (const char* preset : {"tiny-llama3", "tiny-qwen3"}) {
    auto store = tiny(preset);
    CpuBackend f32(store, 64), fp8(store, 64, {}, nullptr, 1, {}, kFp8);
    std::vector<int32_t> prompt;
    std::mt19937 rng(3);
    for (int i = 0; i < 40; ++i) prompt.push_back(int32_t(rng() % 500));
    const auto a = copy(forward_alone(f32, prompt)), b = copy(forward_alone(fp8, prompt));
    double err = 0, range = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      err = std::max(err, double(std::fabs(a[i] - b[i])));
      range = std::max(range, double(std::fabs(a[i])));
    }
    EXPECT_GT(err, 0.0) << preset;
    EXPECT_LT(err, 0.05 * range) << preset;
  }
}

// A token's codes depend on its own numbers only: prefill in one go, token by token, and in
// chunks batched with other sequences in scattered blocks give the same bits.
TEST(CpuKvFp8, AloneChunkedAndBatchedAreBitIdentical) {
  auto store = tiny("tiny-llama3");
  const int block = 4, context = 64;
  std::mt19937 rng(5);
  using Seq = test::SplitSeq;
  std::vector<Seq> seqs;
  for (int len : {1, 6, 13, 30}) {
    Seq s;
    for (int i = 0; i < len; ++i) s.tokens.push_back(int32_t(rng() % 500));
    s.split = len == 1 ? 0 : 1 + int(rng() % (len - 1));
    CpuBackend alone(store, context, {block, 0}, nullptr, 1, {}, kFp8);
    s.alone = copy(forward_alone(alone, s.tokens));
    CpuBackend stepwise(store, context, {block, 0}, nullptr, 1, {}, kFp8);
    std::vector<float> last;
    for (size_t i = 0; i < s.tokens.size(); ++i)
      last = copy(forward_alone(stepwise, std::span(&s.tokens[i], 1), int(i)));
    EXPECT_EQ(last, s.alone) << "token by token, length " << len;
    seqs.push_back(std::move(s));
  }
  const int total = test::scatter_blocks(seqs, block, rng);
  CpuBackend shared(store, context, {block, total}, nullptr, 1, {}, kFp8);
  const test::SplitSteps steps = test::split_steps(seqs);
  shared.forward(steps.cached);
  shared.forward(steps.batch);
  for (size_t i = 0; i < seqs.size(); ++i)
    EXPECT_EQ(copy(shared.logits(int(i))), seqs[i].alone) << "batched sequence " << i;
}

// Per token and KV head: head_dim codes + a 4-byte scale instead of head_dim fp32 numbers (on
// the GPU, instead of head_dim 16-bit ones: 2x); the same kv_pool_gb holds that many more blocks.
TEST(CpuKvFp8, ThePoolHoldsMoreBlocksInTheSameBytes) {
  auto store = tiny("tiny-llama3");
  const ModelConfig& c = store->config();
  const int64_t f32 = CpuBackend::kv_bytes_per_token(c);
  const int64_t fp8 = CpuBackend::kv_bytes_per_token(c, kFp8);
  EXPECT_EQ(f32, 2 * int64_t(c.n_layers) * c.n_kv_heads * c.head_dim * 4);
  EXPECT_EQ(fp8, 2 * int64_t(c.n_layers) * c.n_kv_heads * (c.head_dim + 4));

  EngineOptions options;
  options.backend = BackendKind::Cpu;
  options.context_length = 64;
  options.kv_pool_gb = 0.01;
  EngineWeights weights;
  weights.store = store;
  const int f32_blocks = make_backend(options, weights)->kv_pool().num_blocks;
  options.kv_cache_dtype = kFp8;
  const int fp8_blocks = make_backend(options, weights)->kv_pool().num_blocks;
  const double gib = double(1ull << 30) * options.kv_pool_gb;
  const auto blocks = [&](int64_t per_token) {  // the positions that fit, in whole blocks
    return (int64_t(gib / double(per_token)) + options.kv_block_size - 1) / options.kv_block_size;
  };
  EXPECT_EQ(f32_blocks, blocks(f32));
  EXPECT_EQ(fp8_blocks, blocks(fp8));
  EXPECT_GE(fp8_blocks, 2 * f32_blocks);
}

// Prefix caching and KV sharing never mix an fp8 cache's blocks with a 16-bit one's.
TEST(CpuKvFp8, IsItsOwnCacheDomain) {
  EngineOptions options;
  const BlockKey plain = cache_domain_key(options, "cpu", "model");
  options.kv_cache_dtype = kFp8;
  EXPECT_NE(cache_domain_key(options, "cpu", "model"), plain);
}

}  // namespace
}  // namespace hearth
