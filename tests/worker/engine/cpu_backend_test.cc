#include "worker/engine/cpu_backend.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

#include "tests/worker/engine/split_sequences.h"
#include "tests/worker/engine/synth_models.h"
#include "tools/synth_model.h"
#include "weight-server/model/host_store.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

// One directory per preset and dtype.
std::shared_ptr<const WeightStore> tiny(const std::string& preset, DType dtype = DType::BF16) {
  SynthOptions opt = test::synth_options(preset);
  opt.dtype = dtype;
  return test::synth_host_store("cpu_backend_" + preset + "_" + std::string(dtype_name(dtype)),
                                opt);
}

std::vector<float> copy(std::span<const float> s) {
  return {s.begin(), s.end()};
}

// Prefill of n tokens at once must give the same last logits as feeding them one by one, bit
// for bit: every row is computed on its own, and the KV cache and positions are right in both.
TEST(CpuBackend, PrefillEqualsIncrementalDecode) {
  for (const char* preset : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"}) {
    auto store = tiny(preset);
    CpuBackend a(store, 64), b(store, 64);
    std::vector<int32_t> tokens = {5, 17, 300, 2, 99, 42, 7};
    auto la = copy(forward_alone(a, tokens));
    std::vector<float> lb;
    for (size_t i = 0; i < tokens.size(); ++i)
      lb = copy(forward_alone(b, std::span(&tokens[i], 1), int(i)));
    EXPECT_EQ(la, lb) << preset;
  }
}

TEST(CpuBackend, RewindingRecomputesTheSameLogits) {
  auto store = tiny("tiny-llama");
  CpuBackend cpu(store, 32);
  std::vector<int32_t> prompt = {1, 2, 3, 4};
  forward_alone(cpu, prompt);
  int32_t next = 9;
  auto first = copy(forward_alone(cpu, std::span(&next, 1), 4));
  int32_t other = 10;
  EXPECT_NE(first, copy(forward_alone(cpu, std::span(&other, 1), 4)));  // overwrite position 4
  EXPECT_EQ(first, copy(forward_alone(cpu, std::span(&next, 1), 4)));   // fixed reduction order
}

TEST(CpuBackend, DtypesAgree) {
  CpuBackend f32(tiny("tiny-llama", DType::F32), 16);
  CpuBackend bf16(tiny("tiny-llama", DType::BF16), 16);
  std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  auto a = copy(forward_alone(f32, prompt)), b = copy(forward_alone(bf16, prompt));
  double err = 0, range = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, double(std::abs(a[i] - b[i])));
    range = std::max(range, double(std::abs(a[i])));
  }
  EXPECT_GT(err, 0.0);           // bf16 rounding shows
  EXPECT_LT(err, 0.05 * range);  // but only as rounding
}

// Sequences of different lengths, some prefilling a chunk and some decoding, in scattered
// blocks of one pool, batched together and in a different order: each one's logits are
// bit-identical to the same sequence run alone in blocks 0, 1, 2, ...
TEST(CpuBackend, BatchedSequencesMatchEachAloneBitForBit) {
  for (const char* preset : {"tiny-llama3", "tiny-qwen3"}) {
    auto store = tiny(preset);
    const int block = 4, context = 64;
    std::mt19937 rng(7);
    using Seq = test::SplitSeq;
    std::vector<Seq> seqs;
    for (int len : {1, 7, 9, 16, 23, 40}) {
      Seq s;
      for (int i = 0; i < len; ++i) s.tokens.push_back(int32_t(rng() % 500));
      s.split = len == 1 ? 0 : int(rng() % len);
      CpuBackend alone(store, context, {block, 0});
      s.alone = copy(forward_alone(alone, s.tokens));
      seqs.push_back(std::move(s));
    }
    // One shared pool; every sequence gets blocks scattered over it.
    const int total_blocks = test::scatter_blocks(seqs, block, rng);

    for (bool reversed : {false, true}) {
      CpuBackend shared(store, context, {block, total_blocks});
      test::SplitSteps steps = test::split_steps(seqs);
      if (reversed) std::reverse(steps.batch.entries.begin(), steps.batch.entries.end());
      shared.forward(steps.cached);
      shared.forward(steps.batch);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const size_t entry = reversed ? seqs.size() - 1 - i : i;
        EXPECT_EQ(copy(shared.logits(int(entry))), seqs[i].alone)
            << preset << " sequence " << i << " reversed " << reversed;
      }
    }
  }
}

TEST(CpuBackend, RefusesBadTokensAndContextOverflow) {
  auto store = tiny("tiny-llama");
  CpuBackend cpu(store, 8);
  std::vector<int32_t> bad = {1, 512};
  EXPECT_THROW(forward_alone(cpu, bad), std::runtime_error);
  std::vector<int32_t> negative = {-1};
  EXPECT_THROW(forward_alone(cpu, negative), std::runtime_error);
  std::vector<int32_t> nine(9, 1);
  try {
    forward_alone(cpu, nine);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("context length 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(forward_alone(cpu, std::span(nine.data(), 0)), std::runtime_error);
}

TEST(CpuBackend, RefusesBadBlockTablesAndLogitsNotAskedFor) {
  auto store = tiny("tiny-llama");
  CpuBackend cpu(store, 32, {4, 3});
  std::vector<int32_t> tokens(6, 1);
  auto expect_refused = [&](const ForwardBatch& batch, const std::string& message) {
    try {
      cpu.forward(batch);
      ADD_FAILURE() << "accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  const std::vector<int32_t> short_table = {0}, outside = {0, 3}, good = {2, 0};
  expect_refused({{{tokens, 0, short_table, true}}}, "block table has 1 blocks, 2 are needed");
  expect_refused({{{tokens, 0, outside, true}}}, "KV block 3 is outside the pool of 3");
  expect_refused({}, "at least one sequence");
  expect_refused({{{tokens, 0, good, true}, {{}, 0, good, true}}}, "batch entry 1");
  cpu.forward({{{tokens, 0, good, false}, {std::span(tokens).first(2), 0, good, true}}});
  EXPECT_THROW(cpu.logits(0), std::runtime_error);  // did not want logits
  EXPECT_EQ(cpu.logits(1).size(), size_t(store->config().vocab));
  EXPECT_THROW(cpu.logits(2), std::runtime_error);
}

}  // namespace
}  // namespace hearth
