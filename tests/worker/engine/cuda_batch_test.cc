// The batched CUDA engine: against the CPU engine (logits within bf16 tolerance, greedy tokens
// wherever the CPU's margin is decisive), and batch invariance end to end through Engine: every
// request's tokens and logprobs are bit-identical whether it runs alone or among 1 .. 100
// others, whatever the token budget (so however its prompt is chunked), with decode graphs on
// or off, and when a small pool makes requests wait and be preempted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "kernels/device_sm_count.h"
#include "kernels/wgmma_matmul.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/matmul_tiling_sweep.h"
#include "tests/support/paths.h"
#include "tests/worker/engine/batch_engine_options.h"
#include "tests/worker/engine/engine_outcomes.h"
#include "tests/worker/engine/mixed_requests.h"
#include "tests/worker/engine/synth_models.h"
#include "tests/worker/engine/teacher_forced.h"
#include "tools/synth_model.h"
#include "weight-server/model/device_store.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "base/read_file.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/cuda/cuda_backend.h"
#include "worker/engine/cuda/cuda_batch_backend.h"
#include "worker/engine/engine.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path synth(const std::string& name, const json& overrides,
               const std::string& preset = "tiny-llama3") {
  return test::synth_dir("cuda_batch_" + name, test::synth_options(preset, overrides));
}

EngineOptions options(int max_batch_tokens = 2048, int max_running = 128,
                      int64_t pool_tokens = 1 << 17) {
  return test::batch_engine_options(max_batch_tokens, max_running, pool_tokens);
}

std::vector<float> copy(std::span<const float> s) {
  return {s.begin(), s.end()};
}

// ---- Against the CPU engine ---------------------------------------------------------------

void check_against_cpu(const fs::path& dir, const std::vector<int32_t>& prompt, int steps,
                       const std::string& what, EngineOptions o = options(), int min_decisive = 0) {
  auto hf = std::make_shared<HfModel>(HfModel::open(dir));
  const int context = int(prompt.size()) + steps + 8;
  CpuBackend cpu(std::make_shared<HostStore>(hf), context);
  o.kv_pool_tokens = context;
  CudaBatchBackend gpu(DeviceStore::upload(*hf, {}), o, context);
  EXPECT_GE(test::check_teacher_forced(cpu, gpu, prompt, steps, 2e-2, what).decisive, min_decisive)
      << what;
}

TEST(CudaBatch, MatchesCpuOnEveryGoldenVariant) {
  HEARTH_REQUIRE_GPU();
  for (const auto& entry : fs::directory_iterator(test::source_dir() / "tests/golden/hf")) {
    const json golden = json::parse(read_file(entry.path() / "golden.json"));
    check_against_cpu(entry.path(), golden["prompt"].get<std::vector<int32_t>>(), 40,
                      entry.path().filename().string(), options(), 10);
  }
}

// Production head sizes (head_dim 128 with GQA 4, head_dim 64 with GQA 7 and biases, Qwen3's
// head norm), prompts long enough to cross an attention split (512 positions), prefilled in
// chunks of 64 tokens by a backend whose steps hold 64.
TEST(CudaBatch, MatchesCpuOnProductionHeadShapesInChunks) {
  HEARTH_REQUIRE_GPU();
  for (const auto& [name, cfg, preset] : test::production_head_shapes()) {
    std::vector<int32_t> prompt(600);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919) % 1999);
    check_against_cpu(synth(name, cfg, preset), prompt, 20, name, options(64));
  }
}

// batch_invariant: false runs the projections through cuBLASLt (gate and up as separate GEMMs,
// SwiGLU after them), prefill chunks and decodes alike: not the same bits, but the same model.
TEST(CudaBatch, NonInvariantCublasPathMatchesCpu) {
  HEARTH_REQUIRE_GPU();
  const json cfg = {{"hidden_size", 512}, {"num_attention_heads", 4},  {"num_key_value_heads", 1},
                    {"head_dim", 128},    {"intermediate_size", 1024}, {"vocab_size", 3000}};
  std::vector<int32_t> prompt(300);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919) % 2999);
  EngineOptions o = options(256);
  o.batch_invariant = false;
  check_against_cpu(synth("cublas", cfg), prompt, 10, "batch_invariant false", o);
}

// ---- Batch invariance through the engine ----------------------------------------------------

// test::mixed_requests (prompts of 1 .. 700 tokens: some cross an attention split), sampled
// greedy, top-p, top-k, min-p with a repetition penalty, and over the whole vocabulary.
std::vector<Request> mixed_requests(int n, int vocab) {
  std::vector<SamplingParams> kinds(5);
  kinds[0].temperature = 0;
  kinds[1].temperature = 0.8f, kinds[1].top_p = 0.9f;
  kinds[2].temperature = 1.0f, kinds[2].top_k = 40;
  kinds[3].temperature = 0.7f, kinds[3].min_p = 0.05f, kinds[3].repetition_penalty = 1.3f;
  kinds[4].temperature = 1.2f;
  return test::mixed_requests(n, vocab, 1234 + n, kinds);
}

class CudaBatchEngine : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::have_gpu()) return;
    const fs::path dir = synth("engine", test::small_gqa_config());
    hf_ = new std::shared_ptr<HfModel>(std::make_shared<HfModel>(HfModel::open(dir)));
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
  // Each request alone, on one backend, one engine per request.
  std::map<std::string, test::EngineOutcome> alone(const std::vector<Request>& requests) {
    const EngineOptions o = options();
    return test::run_each_alone(*backend(o), o, requests);
  }
  static inline std::shared_ptr<HfModel>* hf_ = nullptr;
  static inline std::shared_ptr<const WeightStore>* dev_ = nullptr;
};

// 1, 2, 7, 32 and 100 requests together, their prompts chunked by a budget of 256 tokens (so
// prompt chunks share steps with decodes): each request's tokens and logprobs are those it gets
// alone, prefilled in one piece.
TEST_F(CudaBatchEngine, BatchedEqualsAloneBitForBit) {
  HEARTH_REQUIRE_GPU();
  const std::vector<Request> all = mixed_requests(100, 3000);
  const std::map<std::string, test::EngineOutcome> want = alone(all);
  const EngineOptions o = options(256, 128);
  auto b = backend(o);
  test::expect_together_equals_alone(*b, o, all, want, {1, 2, 7, 32, 100});
  EXPECT_GT(b->decode_graphs(), 0);
}

// Budgets of 16 and 2048 tokens per step (and a backend whose sub-steps hold 16): same bits.
// Graphs off, matmul tilings timed and picked per band of rows, and decode steps capped or not
// (decode_step_tokens): the same bits.
TEST_F(CudaBatchEngine, BudgetAndGraphsDoNotChangeBits) {
  HEARTH_REQUIRE_GPU();
  const std::vector<Request> requests = mixed_requests(32, 3000);
  const EngineOptions wide = options(2048, 64);
  const std::map<std::string, test::EngineOutcome> want =
      test::run_engine(*backend(wide), wide, requests);
  const EngineOptions narrow = options(16, 64);
  test::expect_same_outcomes(test::run_engine(*backend(narrow), narrow, requests), want,
                             "max_batch_tokens 16");
  EngineOptions eager = wide;
  eager.cuda_graphs = false;
  test::expect_same_outcomes(test::run_engine(*backend(eager), eager, requests), want,
                             "cuda_graphs off");
  EngineOptions tuned = wide;
  tuned.matmul_tiling = MatmulTiling::Tuned;
  test::expect_same_outcomes(test::run_engine(*backend(tuned), tuned, requests), want,
                             "matmul_tiling tuned");
  // Prompt chunks beside decodes cut to a step of 24 tokens, or not cut at all: same bits.
  for (int decode_step : {24, 0}) {
    EngineOptions capped = wide;
    capped.decode_step_tokens = decode_step;
    test::expect_same_outcomes(test::run_engine(*backend(capped), capped, requests), want,
                               "decode_step_tokens " + std::to_string(decode_step));
  }
}

// A pool of 50 blocks, about one long sequence, for 24 requests admitted 256 prompt tokens a
// step: they wait, running ones are preempted and recomputed, and every request still gets
// the tokens it gets alone.
TEST_F(CudaBatchEngine, PreemptionAndWaitingKeepTheTokens) {
  HEARTH_REQUIRE_GPU();
  const std::vector<Request> requests = mixed_requests(24, 3000);
  const EngineOptions o = options(256, 24, 800);
  auto b = backend(o);
  const std::map<std::string, test::EngineOutcome> got = test::run_engine(*b, o, requests);
  int preempted = 0;
  for (const auto& [id, r] : got) preempted += r.preemptions;
  EXPECT_GT(preempted, 0) << "the pool was meant to be too small";
  test::expect_same_outcomes(got, alone(requests), "small pool");
}

// Prefix caching: 48 requests behind shared prefixes of 0 to 600 tokens (inside a block, on a
// block's edge, across attention splits) get the same bits with the cache on and off, whether
// the shared blocks came from a request still in flight, a finished one, or were kept through
// a preemption (the second pool is too small for them all).
TEST_F(CudaBatchEngine, PrefixCacheDoesNotChangeBits) {
  HEARTH_REQUIRE_GPU();
  std::vector<Request> requests = mixed_requests(48, 3000);
  std::mt19937 rng(99);
  std::vector<int32_t> prefix(600);
  for (int32_t& t : prefix) t = int32_t(rng() % 3000);
  const int shared[] = {0, 15, 16, 200, 513, 600};
  for (size_t i = 0; i < requests.size(); ++i) {
    std::vector<int32_t>& p = requests[i].prompt;
    p.insert(p.begin(), prefix.begin(), prefix.begin() + shared[i % 6]);
    p.resize(std::min<size_t>(p.size(), kContext - 40));
  }
  for (const EngineOptions& base : {options(256, 48), options(256, 24, 2000)}) {
    EngineOptions off = base;
    off.prefix_cache = false;
    const std::map<std::string, test::EngineOutcome> want =
        test::run_engine(*backend(off), off, requests);
    auto b = backend(base);
    Engine engine(*b, base, nullptr, {});
    for (const Request& r : requests) engine.submit(r);
    std::map<std::string, test::EngineOutcome> got;
    int cached = 0;
    while (engine.has_work())
      for (const RequestOutput& step : engine.step()) {
        test::EngineOutcome& r = got[step.id];
        for (const TokenOutput& t : step.tokens) {
          r.tokens.push_back(t.token);
          r.logprobs.push_back(t.logprob);
        }
        if (step.finish) r.reason = step.finish->reason, cached += step.finish->cached_tokens;
      }
    const std::string what = "pool " + std::to_string(base.kv_pool_tokens);
    test::expect_same_outcomes(got, want, what);
    EXPECT_GT(cached, 0) << what;
    EXPECT_EQ(engine.stats().kv_blocks_used, 0) << what;
  }
}

// ---- The streaming decode tile, end to end --------------------------------------------------

// The 8B's widths (hidden 4,096, 32 heads of 128 over 8 KV heads) in two layers with a small
// vocabulary (~0.4 GB): decode steps of 1-8 rows run q/k/v, o, down and the head on the
// streaming tile (kernels/stream_matmul.h; o, down and the head with a warp per 8 weight rows),
// which no small test model reaches (its launches are too few warps for the rule). The rule's
// choice is asserted first, so the test keeps covering the tile as the rule changes; then 12
// requests alone and 1, 5 and 12 at once: decodes of 1-8 rows on the tile, of 9-12 rows and the
// prompt chunks on wgmma tiles, the same tokens and logprob bits.
TEST(CudaBatchStreamingTile, WideModelBatchedEqualsAlone) {
  HEARTH_REQUIRE_WGMMA();
  const int hidden = 4096, kv = 1024, intermediate = 4096, vocab = 3000;
  const int64_t sms = kernels::device_sm_count();
  // The rule takes launches of one to three resident warps an SM: 188 (head) to 384 (q/k/v).
  if (sms < 128 || sms > 188) GTEST_SKIP() << sms << " SMs: this model's launches miss the rule";
  const char weight = 0;  // a weight's address: the rule reads shapes only
  auto tiles = [&](int m, int n, int k, bool qkv = false) {
    kernels::MatmulArgs a;
    a.w = &weight, a.m = m, a.n = n, a.k = k;
    if (qkv) a.more = {{{&weight, nullptr, nullptr, kv}, {&weight, nullptr, nullptr, kv}}};
    return kernels::wgmma_matmul_tiles(kernels::MatmulEpilogue::StoreF32, a);
  };
  using kernels::WgmmaTiles;
  for (int m : {1, 8}) {
    EXPECT_EQ(tiles(m, hidden, hidden, true), WgmmaTiles::M8Stream) << "q/k/v, m " << m;
    EXPECT_EQ(tiles(m, hidden, hidden), WgmmaTiles::M8Stream8) << "o, m " << m;
    EXPECT_EQ(tiles(m, hidden, intermediate), WgmmaTiles::M8Stream8) << "down, m " << m;
    EXPECT_EQ(tiles(m, vocab, hidden), WgmmaTiles::M8Stream8) << "head, m " << m;
  }
  for (bool qkv : {false, true}) {
    const WgmmaTiles nine = tiles(9, hidden, hidden, qkv);
    EXPECT_TRUE(nine != WgmmaTiles::M8Stream && nine != WgmmaTiles::M8Stream8);
  }

  const json wide = {
      {"hidden_size", hidden}, {"num_attention_heads", 32},         {"num_key_value_heads", 8},
      {"head_dim", 128},       {"intermediate_size", intermediate}, {"num_hidden_layers", 2},
      {"vocab_size", vocab}};
  auto hf = std::make_shared<HfModel>(HfModel::open(synth("wide", wide)));
  const std::shared_ptr<const WeightStore> dev = DeviceStore::upload(*hf, {});
  const int context = 1024;
  const EngineOptions o = options(256, 16, 1 << 15);
  CudaBatchBackend b(dev, o, context);
  const std::vector<Request> requests = mixed_requests(12, vocab);
  test::expect_together_equals_alone(b, o, requests, test::run_each_alone(b, o, requests),
                                     {1, 5, 12});
  EXPECT_GT(b.decode_graphs(), 0);
}

// ---- The backend's checks and the factory ---------------------------------------------------

// A checkpoint whose final norm is NaN: the requests end in the host engine's error (the
// batched sampler's NaN logprob is checked), where a greedy pick used to come back as id
// 2^31 - 1 and fail the next step as a token outside the vocabulary.
TEST(CudaBatch, NonFiniteLogitsEndTheRequestsWithAnErrorSayingSo) {
  HEARTH_REQUIRE_GPU();
  const fs::path dir = synth("nan_norm", test::small_gqa_config());
  test::poison_with_nan(dir, "model.norm.weight");
  auto hf = std::make_shared<HfModel>(HfModel::open(dir));
  const EngineOptions o = options(2048, 4, 1024);
  CudaBatchBackend gpu(DeviceStore::upload(*hf, {}), o, 64);
  test::expect_non_finite_logits_end_the_requests(gpu, o);
}

TEST_F(CudaBatchEngine, RefusesBadEntriesNamingThem) {
  HEARTH_REQUIRE_GPU();
  auto b = backend(options(2048, 4, 256));
  const std::vector<int32_t> ok = {1, 2, 3}, bad = {1, 3000};
  const std::vector<int32_t> table = {0}, outside = {999};
  auto message = [&](const ForwardBatch& batch) {
    try {
      b->forward(batch);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ForwardBatch token{{{ok, 0, table, true}, {bad, 0, table, true}}};
  EXPECT_NE(message(token).find("batch entry 1: token id 3000"), std::string::npos)
      << message(token);
  ForwardBatch block{{{ok, 0, outside, true}}};
  EXPECT_NE(message(block).find("KV block 999"), std::string::npos) << message(block);
  ForwardBatch too_many;
  for (int i = 0; i < 5; ++i) too_many.entries.push_back({ok, 0, table, true});
  EXPECT_NE(message(too_many).find("max_running"), std::string::npos) << message(too_many);
  ForwardBatch fine{{{ok, 0, table, false}}};
  b->forward(fine);
  EXPECT_THROW(b->logits(0), std::runtime_error);  // logits were not asked for
}

// The step clock: a step's device time is known once its sampling is back, not before. The
// phase profile (an eager forward with events between its kernels) changes no bit of the
// logits a graph replay gives, and times the phases it names.
TEST_F(CudaBatchEngine, StepDeviceTimeAndPhaseProfile) {
  HEARTH_REQUIRE_GPU();
  auto b = backend(options(2048, 4, 256));
  EXPECT_LT(b->last_step_device_ms(), 0);  // no step yet
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5}, next = {6}, table = {0};
  b->forward(ForwardBatch{{{prompt, 0, table, true}}});
  EXPECT_LT(b->last_step_device_ms(), 0);  // forward alone: the step has not ended
  const SampleRequest greedy{};
  b->sample(std::span(&greedy, 1));
  EXPECT_GT(b->last_step_device_ms(), 0);

  const ForwardBatch decode{{{next, 5, table, true}}};
  for (int i = 0; i < 3; ++i) b->forward(decode);  // eager, captured, replayed
  ASSERT_GT(b->decode_graphs(), 0);
  const std::vector<float> replayed = copy(b->logits(0));
  std::array<double, StepPhases::kPhases> ms{};
  b->profile_forward(decode, ms);
  const std::vector<float> profiled = copy(b->logits(0));
  ASSERT_EQ(profiled.size(), replayed.size());
  EXPECT_EQ(std::memcmp(profiled.data(), replayed.data(), replayed.size() * 4), 0);
  for (StepPhase p :
       {StepPhase::Norm, StepPhase::Attention, StepPhase::GateUp, StepPhase::Down, StepPhase::Head})
    EXPECT_GT(ms[int(p)], 0) << step_phase_name(p);
  // q, k and v: one launch on the wgmma kernel, else q then k and v.
  if (ms[int(StepPhase::QKV)] > 0) {
    EXPECT_EQ(ms[int(StepPhase::Q)] + ms[int(StepPhase::KV)], 0);
  } else {
    EXPECT_GT(ms[int(StepPhase::Q)], 0);
    EXPECT_GT(ms[int(StepPhase::KV)], 0);
  }
}

// Without an explicit size the pool is resolve_kv_pool's share of the free memory, capped at
// max_running full contexts: with a GPU's memory the cap decides.
TEST_F(CudaBatchEngine, DefaultPoolIsCappedAtMaxRunningContexts) {
  HEARTH_REQUIRE_GPU();
  auto b = backend(options(2048, 3, 0));
  EXPECT_EQ(b->kv_pool().num_blocks, 3 * kContext / b->kv_pool().block_size);
  EXPECT_EQ(b->kv_pool_bytes(),
            size_t(b->kv_pool().num_blocks) * b->kv_pool().block_size *
                size_t(CudaBatchBackend::kv_bytes_per_token(dev_->get()->config())));
}

// A batch is cut into sub-steps by tokens and by sequences, an entry straddling two when the
// token budget ends inside it.
TEST(CudaBatchSteps, SplitsByTokensAndSequences) {
  const std::vector<int32_t> five(5), three(3), ten(10), table = {0};
  const ForwardBatch batch{
      {{five, 0, table, true}, {three, 0, table, true}, {ten, 0, table, true}}};
  auto steps = [&](int max_tokens, int max_seqs) {
    std::vector<std::array<int, 4>> out;
    for (const SubStep& s : split_substeps(batch, max_tokens, max_seqs))
      out.push_back({int(s.first), int(s.last), s.first_token, s.last_token});
    return out;
  };
  using V = std::vector<std::array<int, 4>>;
  EXPECT_EQ(steps(100, 100), (V{{0, 3, 0, 10}}));
  // Tokens: 5 + 3 of 8, then 8 and 2 of the ten.
  EXPECT_EQ(steps(8, 100), (V{{0, 2, 0, 3}, {2, 3, 0, 8}, {2, 3, 8, 10}}));
  // Sequences: two at a time.
  EXPECT_EQ(steps(100, 2), (V{{0, 2, 0, 3}, {2, 3, 0, 10}}));
  // Both: 6 tokens cut the first entry's successor.
  EXPECT_EQ(steps(6, 2), (V{{0, 2, 0, 1}, {1, 3, 1, 4}, {2, 3, 4, 10}}));
}

TEST_F(CudaBatchEngine, FactoryBuildsTheEngineAsked) {
  HEARTH_REQUIRE_GPU();
  EngineOptions o = options(2048, 8, 4096);
  o.backend = BackendKind::Cuda;
  const EngineWeights weights{*dev_, nullptr};
  EXPECT_NE(dynamic_cast<CudaBatchBackend*>(make_backend(o, weights).get()), nullptr);
  o.cuda_engine = CudaEngineKind::Single;
  EXPECT_NE(dynamic_cast<CudaBackend*>(make_backend(o, weights).get()), nullptr);
  // An unknown engine name never gets this far: the profile refuses it (profile_test.cc).
}

}  // namespace
}  // namespace hearth
