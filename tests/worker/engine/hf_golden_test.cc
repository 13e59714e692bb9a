// The CPU engine against Hugging Face transformers: tiny models of every supported variant,
// saved by transformers itself, with fp32 logits and greedy continuations it computed
// (tools/golden/make_hf_golden.py). Tolerance: 1e-3 x the range of the reference logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "worker/engine/cpu_backend.h"
#include "base/read_file.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kGoldenDir = test::source_dir() / "tests/golden/hf";

std::vector<std::string> variants() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kGoldenDir))
    if (fs::exists(entry.path() / "golden.json")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class HfGolden : public testing::TestWithParam<std::string> {};

TEST_P(HfGolden, LogitsAndGreedyTokensMatchTransformers) {
  const fs::path dir = kGoldenDir / GetParam();
  const json golden = json::parse(read_file(dir / "golden.json"));
  auto store = std::make_shared<HostStore>(std::make_shared<HfModel>(HfModel::open(dir)));
  CpuBackend cpu(store, 128);

  const auto prompt = golden["prompt"].get<std::vector<int32_t>>();
  const auto ref = golden["logits"].get<std::vector<float>>();
  auto logits = forward_alone(cpu, prompt);
  ASSERT_EQ(logits.size(), ref.size());
  const auto [lo, hi] = std::minmax_element(ref.begin(), ref.end());
  const double tolerance = 1e-3 * (*hi - *lo);
  double max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    max_err = std::max(max_err, double(std::abs(logits[i] - ref[i])));
  EXPECT_LE(max_err, tolerance) << GetParam() << ": max abs error " << max_err;
  RecordProperty("max_abs_error", std::to_string(max_err));

  // Greedy, teacher-forced on the reference's own continuation, so one near-tie does not hide
  // every later step: wherever the reference's top-1/top-2 margin exceeds the tolerance, our
  // argmax must be its token.
  const auto greedy = golden["greedy"].get<std::vector<int32_t>>();
  const auto margins = golden["margins"].get<std::vector<double>>();
  int checked = 0;
  int pos = int(prompt.size());
  std::span<const float> l = logits;
  for (size_t step = 0; step < greedy.size(); ++step) {
    const int32_t ours = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    if (margins[step] > tolerance) {
      EXPECT_EQ(ours, greedy[step]) << GetParam() << " step " << step;
      ++checked;
    }
    l = forward_alone(cpu, std::span<const int32_t>(&greedy[step], 1), pos++);
  }
  EXPECT_GE(checked, int(greedy.size()) * 3 / 4) << "too few decisive steps to mean anything";
}

INSTANTIATE_TEST_SUITE_P(Variants, HfGolden, testing::ValuesIn(variants()), [](const auto& info) {
  std::string n = info.param;
  std::replace_if(
      n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
  return n;
});

}  // namespace
}  // namespace hearth
