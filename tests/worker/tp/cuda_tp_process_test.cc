// GPU tensor-parallel ranks as processes (worker/tp/cuda_process_tp.h): a leader in this process
// on GPU 0 and a real hearth-tp-follower on GPU 1, on a synthetic model directory, bf16 and its
// offline fp8 checkpoint (issue 25). TP=2 gives the logits bits and the tokens and logprob bits
// of the in-process CUDA ranks (CudaTpBackend), alone and batched, with decode graphs captured on
// a bucket's second run or every bucket up front on every rank; a follower SIGKILLed mid-run ends
// the leader's requests with an error naming it, with no hang. Skips with fewer than 2 GPUs
// (fp8: or off compute capability 9.0).
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "kernels/fp8_matmul.h"
#include "kernels/fp8_support.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/fp8_devices.h"
#include "tests/worker/engine/engine_outcomes.h"
#include "tests/worker/engine/mixed_requests.h"
#include "tests/worker/engine/synth_models.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/cuda/cuda_tp_backend.h"
#include "worker/engine/engine.h"
#include "worker/model_identity.h"
#include "worker/tp/tp_backend.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

constexpr int kVocab = 3000;
constexpr int kContext = 1024;

// 8 q heads over 2 KV heads (test::small_gqa_config()): one KV head per rank at TP=2. `fp8`: the
// offline compressed-tensors checkpoint of the same seed, which the followers open as it is.
struct Model {
  fs::path dir;
  std::shared_ptr<const HfModel> hf;
  std::shared_ptr<const WeightStore> store;
  std::string identity;
};

Model open_model(const std::string& name, bool fp8) {
  SynthOptions opt = test::synth_options("tiny-llama3", test::small_gqa_config());
  opt.fp8 = fp8;
  Model m;
  m.dir = test::synth_dir(name, opt);
  m.hf = std::make_shared<HfModel>(HfModel::open(m.dir));
  m.store = std::make_shared<HostStore>(m.hf);
  m.identity = model_identity(*m.hf);
  return m;
}

const Model& model(bool fp8 = false) {
  static const Model bf16 = open_model("cuda_tp_process", false);
  if (!fp8) return bf16;
  static const Model f8 = open_model("cuda_tp_process_fp8", true);
  return f8;
}

EngineOptions options() {
  EngineOptions o = test::tp_engine_options(2);
  o.backend = BackendKind::Cuda;
  o.context_length = kContext;
  o.kv_pool_tokens = 1 << 13;
  o.tensor_parallel_processes = true;
  return o;
}

std::unique_ptr<Backend> processes(bool fp8 = false, const TpProcessOptions& p = {}) {
  const Model& m = model(fp8);
  return make_process_tp_backend(
      options(), EngineWeights{m.store, m.hf},
      {.dir = m.dir, .server_socket = {}, .model_name = {}, .identity = m.identity}, p);
}

EngineOptions in_process_options() {
  EngineOptions o = options();
  o.tensor_parallel_processes = false;
  return o;
}

std::unique_ptr<Backend> in_process(bool fp8 = false) {
  return make_backend(in_process_options(), EngineWeights{model(fp8).store, model(fp8).hf});
}

// One weight format the process tests run on.
struct Weights {
  const char* name;
  bool fp8;
};

void PrintTo(const Weights& w, std::ostream* os) {
  *os << w.name;
}

class CudaTpProcesses : public testing::TestWithParam<Weights> {
 protected:
  void SetUp() override {
    HEARTH_REQUIRE_GPUS(2);
    if (GetParam().fp8 && !test::fp8_devices(2))
      GTEST_SKIP() << "fp8 weights run on compute capability 9.0 only";
  }
  static bool fp8() { return GetParam().fp8; }
};

// The pids of this process's hearth-tp-follower children: every process whose parent is this
// one (a child forked by any of its threads names the process as its parent).
std::vector<pid_t> follower_pids() {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t parent = 0;
    rest >> state >> parent;
    if (parent != ::getpid()) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::stringstream s;
    s << cmdline.rdbuf();
    if (s.str().find("hearth-tp-follower") != std::string::npos) pids.push_back(std::stoi(name));
  }
  return pids;
}

TEST_P(CudaTpProcesses, LogitsAreTheInProcessRanksBitForBit) {
  const std::vector<int32_t> prompt = {5, 17, 2999, 1, 1500, 1499, 750, 42, 7};
  std::vector<float> want;
  {
    const auto reference = in_process(fp8());
    const std::span<const float> s = forward_alone(*reference, prompt);
    want.assign(s.begin(), s.end());
  }
  const auto backend = processes(fp8());
  const std::span<const float> got = forward_alone(*backend, prompt);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
}

TEST_P(CudaTpProcesses, TokensAndLogprobsAreTheInProcessRanksAloneAndBatched) {
  const std::vector<Request> requests = test::tp_mixed_requests(5, kVocab, 26);
  const EngineOptions o = options();
  std::map<std::string, test::EngineOutcome> want;
  {
    const auto reference = in_process(fp8());
    want = test::run_engine(*reference, o, requests);
  }
  const auto backend = processes(fp8());
  test::expect_same_outcomes(test::run_engine(*backend, o, requests), want, "batched");
  test::expect_same_outcomes(test::run_each_alone(*backend, o, requests), want, "alone");
  // Again: the decode graphs captured on the first pass replay the same bits.
  test::expect_same_outcomes(test::run_engine(*backend, o, requests), want, "batched again");
}

// Every decode bucket captured at start on every rank (the leader's capture runs as step plans,
// so the follower captures the same buckets in the same order): the bits of the in-process ranks
// captured up front the same way, batched and alone, and of the processes capturing as they go.
TEST_P(CudaTpProcesses, GraphsCapturedUpFrontGiveTheInProcessRanksBits) {
  const std::vector<Request> requests = test::tp_mixed_requests(6, kVocab, 61);
  const EngineOptions o = options();
  std::map<std::string, test::EngineOutcome> want;
  {
    CudaTpBackend reference(*model(fp8()).store, in_process_options(), kContext);
    reference.capture_decode_graphs(kContext);
    want = test::run_engine(reference, o, requests);
  }
  TpProcessOptions up_front;
  up_front.capture_decode_graphs = kContext;
  const auto backend = processes(fp8(), up_front);
  test::expect_same_outcomes(test::run_engine(*backend, o, requests), want, "batched");
  test::expect_same_outcomes(test::run_each_alone(*backend, o, requests), want, "alone");
  const auto as_they_go = processes(fp8());
  test::expect_same_outcomes(test::run_engine(*as_they_go, o, requests), want, "captured later");
}

INSTANTIATE_TEST_SUITE_P(Weights, CudaTpProcesses,
                         testing::Values(Weights{"Bf16", false}, Weights{"Fp8", true}),
                         [](const testing::TestParamInfo<Weights>& info) {
                           return std::string(info.param.name);
                         });

TEST(CudaTpProcessesFault, AKilledFollowerFailsTheLeadersRequestsNamingIt) {
  HEARTH_REQUIRE_GPUS(2);
  const auto backend = processes();
  const std::vector<pid_t> followers = follower_pids();
  ASSERT_EQ(followers.size(), 1u);
  Engine engine(*backend, options(), nullptr, {});
  for (const Request& r : test::tp_mixed_requests(4, kVocab, 7)) engine.submit(r);
  std::vector<std::string> errors;
  for (int step = 0; engine.has_work(); ++step) {
    if (step == 2) ::kill(followers[0], SIGKILL);
    for (const RequestOutput& out : engine.step())
      if (out.finish) {
        EXPECT_EQ(out.finish->reason, FinishReason::Error) << out.id;
        errors.push_back(out.finish->error);
      }
  }
  ASSERT_EQ(errors.size(), 4u);
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("tensor-parallel rank 1 (pid "), std::string::npos) << e;
    EXPECT_NE(e.find("killed by signal 9"), std::string::npos) << e;
  }
  EXPECT_NE(backend->failure().find("killed by signal 9"), std::string::npos);
}

}  // namespace
}  // namespace hearth
