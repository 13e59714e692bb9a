#include "worker/engine/cpu_backend.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "tools/synth_model.h"
#include "weight-server/model/host_store.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const WeightStore> tiny(const std::string& preset, DType dtype = DType::BF16) {
  // One directory per process and dtype: ctest runs these tests in parallel processes.
  const fs::path dir = fs::path(testing::TempDir()) /
                       ("cpu_backend_" + preset + "_" + std::string(dtype_name(dtype)) + "_" +
                        std::to_string(getpid()));
  fs::remove_all(dir);
  SynthOptions opt;
  opt.preset = preset;
  opt.dtype = dtype;
  write_synthetic_model(dir, opt);
  return std::make_shared<HostStore>(std::make_shared<HfModel>(HfModel::open(dir)));
}

std::vector<float> copy(std::span<const float> s) {
  return {s.begin(), s.end()};
}

// Prefill of n tokens at once must give the same last logits as feeding them one by one: the
// KV cache and positions are right in both paths.
TEST(CpuBackend, PrefillEqualsIncrementalDecode) {
  for (const char* preset : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"}) {
    auto store = tiny(preset);
    CpuBackend a(store, 64), b(store, 64);
    std::vector<int32_t> tokens = {5, 17, 300, 2, 99, 42, 7};
    a.forward(tokens, 0);
    for (size_t i = 0; i < tokens.size(); ++i) b.forward(std::span(&tokens[i], 1), int(i));
    auto la = copy(a.logits()), lb = copy(b.logits());
    for (size_t i = 0; i < la.size(); ++i)
      ASSERT_NEAR(la[i], lb[i], 1e-4) << preset << " logit " << i;
  }
}

TEST(CpuBackend, RewindingRecomputesTheSameLogits) {
  auto store = tiny("tiny-llama");
  CpuBackend cpu(store, 32);
  std::vector<int32_t> prompt = {1, 2, 3, 4};
  cpu.forward(prompt, 0);
  int32_t next = 9;
  cpu.forward(std::span(&next, 1), 4);
  auto first = copy(cpu.logits());
  int32_t other = 10;
  cpu.forward(std::span(&other, 1), 4);  // overwrite position 4
  EXPECT_NE(first, copy(cpu.logits()));
  cpu.forward(std::span(&next, 1), 4);
  EXPECT_EQ(first, copy(cpu.logits()));  // bit-identical: fixed reduction order
}

TEST(CpuBackend, DtypesAgree) {
  CpuBackend f32(tiny("tiny-llama", DType::F32), 16);
  CpuBackend bf16(tiny("tiny-llama", DType::BF16), 16);
  std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  f32.forward(prompt, 0);
  bf16.forward(prompt, 0);
  auto a = copy(f32.logits()), b = copy(bf16.logits());
  double err = 0, range = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, double(std::abs(a[i] - b[i])));
    range = std::max(range, double(std::abs(a[i])));
  }
  EXPECT_GT(err, 0.0);           // bf16 rounding shows
  EXPECT_LT(err, 0.05 * range);  // but only as rounding
}

TEST(CpuBackend, RefusesBadTokensAndContextOverflow) {
  auto store = tiny("tiny-llama");
  CpuBackend cpu(store, 8);
  std::vector<int32_t> bad = {1, 512};
  EXPECT_THROW(cpu.forward(bad, 0), std::runtime_error);
  std::vector<int32_t> negative = {-1};
  EXPECT_THROW(cpu.forward(negative, 0), std::runtime_error);
  std::vector<int32_t> nine(9, 1);
  try {
    cpu.forward(nine, 0);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("context length 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cpu.forward(std::span(nine.data(), 0), 0), std::runtime_error);
}

}  // namespace
}  // namespace hearth
