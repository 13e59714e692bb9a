// Tensor parallelism on the GPU, one process driving 2+ GPUs (cuda_tp_backend.h, issue 26):
// TP=2 gives every request the same tokens and logprob bits alone and batched, run after run,
// with decode graphs (one per rank) or eager, and stays close to the CPU engine's TP=2 on the
// same weights. Skips with fewer than 2 GPUs,
// except the refusals, which need none.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "tests/kernels/gpu_test_util.h"
#include "tests/worker/engine/engine_outcomes.h"
#include "tests/worker/engine/mixed_requests.h"
#include "tests/worker/engine/synth_models.h"
#include "tests/worker/engine/teacher_forced.h"
#include "tools/synth_model.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "weight-server/model/rank_store.h"
#include "weight-server/model/shard_plan.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/cuda/cuda_tp_backend.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using test::gpu_count;

constexpr int kContext = 1024;
constexpr int kVocab = 3000;

// 8 q heads over 2 KV heads, 1024 channels, 3000 words (test::small_gqa_config()): TP=2 gives
// each rank 4 q heads, one KV head, 512 channels and 1500 words (TP=4 would leave a rank half a
// KV head: refused).
std::shared_ptr<const WeightStore> host_model() {
  static std::shared_ptr<const WeightStore> store = test::synth_host_store(
      "cuda_tp", test::synth_options("tiny-llama3", test::small_gqa_config()));
  return store;
}

EngineOptions options(int tp, int max_batch_tokens = 256) {
  return test::tp_engine_options(tp, max_batch_tokens);
}

std::vector<Request> mixed_requests(int n) {
  return test::tp_mixed_requests(n, kVocab, 4321 + n);
}

TEST(CudaTensorParallel, AloneEqualsBatchedBitForBit) {
  HEARTH_REQUIRE_GPUS(2);
  const std::vector<Request> all = mixed_requests(24);
  const EngineOptions o = options(2);
  CudaTpBackend tp(*host_model(), o, kContext);
  std::map<std::string, test::EngineOutcome> alone;
  for (const Request& r : all) alone[r.id] = test::run_engine(tp, o, {r}).at(r.id);
  test::expect_together_equals_alone(tp, o, all, alone, {2, 7, 24});
}

TEST(CudaTensorParallel, RepeatRunsStepBudgetsAndGraphsAreIdentical) {
  HEARTH_REQUIRE_GPUS(2);
  const std::vector<Request> all = mixed_requests(16);
  const EngineOptions wide = options(2, 2048);
  const auto want =
      test::run_engine(*std::make_unique<CudaTpBackend>(*host_model(), wide, kContext), wide, all);
  test::expect_same_outcomes(
      test::run_engine(*std::make_unique<CudaTpBackend>(*host_model(), wide, kContext), wide, all),
      want, "a second backend");
  EngineOptions eager = wide;
  eager.cuda_graphs = false;
  test::expect_same_outcomes(
      test::run_engine(*std::make_unique<CudaTpBackend>(*host_model(), eager, kContext), eager,
                       all),
      want, "cuda_graphs off (decode steps eager, not replayed per rank)");
  const EngineOptions narrow = options(2, 32);
  test::expect_same_outcomes(
      test::run_engine(*std::make_unique<CudaTpBackend>(*host_model(), narrow, kContext), narrow,
                       all),
      want, "max_batch_tokens 32");
}

// Every decode bucket's graphs captured up front (as hearth-tp-bench does) replay the bits the
// eager steps compute.
TEST(CudaTensorParallel, GraphsCapturedUpFrontGiveTheEagerBits) {
  HEARTH_REQUIRE_GPUS(2);
  const std::vector<Request> all = mixed_requests(12);
  EngineOptions eager = options(2);
  eager.cuda_graphs = false;
  const auto want = test::run_engine(
      *std::make_unique<CudaTpBackend>(*host_model(), eager, kContext), eager, all);
  const EngineOptions o = options(2);
  CudaTpBackend captured(*host_model(), o, kContext);
  captured.capture_decode_graphs(kContext);
  test::expect_same_outcomes(test::run_engine(captured, o, all), want,
                             "decode graphs captured up front");
}

// A model sharded elsewhere (here: host pieces, as a memfd server serves them) runs as the
// ranks this process cuts itself: the same pieces, the same bits.
TEST(CudaTensorParallel, ShardedPiecesGiveTheSameBitsAsCutHere) {
  HEARTH_REQUIRE_GPUS(2);
  const std::vector<Request> all = mixed_requests(8);
  const EngineOptions o = options(2);
  const auto want =
      test::run_engine(*std::make_unique<CudaTpBackend>(*host_model(), o, kContext), o, all);
  const ShardPlan plan = ShardPlan::make(host_model()->config(), 2);
  std::vector<std::shared_ptr<const WeightStore>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(std::make_shared<RankStore>(*host_model(), plan, r));
  EngineOptions cuda = o;
  cuda.backend = BackendKind::Cuda;
  test::expect_same_outcomes(
      test::run_engine(*make_backend(cuda, EngineWeights{ranks[0], nullptr, ranks}), cuda, all),
      want, "served-style pieces through make_backend");
  EngineOptions wrong = o;
  wrong.tensor_parallel = 1;
  EXPECT_THROW(CudaTpBackend(ranks, wrong, kContext), std::runtime_error);
}

// Teacher-forced along the CPU's greedy path: the GPU's TP=2 logits within 2% of their range
// of the CPU's TP=2 (bf16 activations against fp32), and the same argmax where the CPU's is
// decisive.
TEST(CudaTensorParallel, CloseToCpuTensorParallel) {
  HEARTH_REQUIRE_GPUS(2);
  const auto store = host_model();
  CpuBackend cpu(store, kContext, {}, nullptr, 2);
  EngineOptions o = options(2);
  o.kv_pool_tokens = kContext;
  CudaTpBackend gpu(*store, o, kContext);
  std::vector<int32_t> prompt(200);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919) % kVocab);
  test::check_teacher_forced(cpu, gpu, prompt, 15, 2e-2, "tensor_parallel 2");
}

TEST(CudaTensorParallel, RefusesMoreGpusThanPresentAndCountsThatDoNotDivide) {
  try {
    CudaTpBackend tp(*host_model(), options(gpu_count() + 1), kContext);
    FAIL() << "tensor_parallel " << gpu_count() + 1 << " was built";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("GPUs") != std::string::npos) << what;
  }
  if (gpu_count() < 4) return;
  try {
    CudaTpBackend tp(*host_model(), options(4), kContext);
    FAIL() << "tensor_parallel 4 over 2 KV heads was built";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hearth
