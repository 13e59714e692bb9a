// Tensor-parallel ranks as processes (issue 26, worker/tp/): a leader in this process and real
// hearth-tp-follower processes on a synthetic model directory. TP=2 and TP=4 give the logits
// bits and the tokens and logprob bits of the in-process ranks, alone and batched; a follower
// SIGKILLed mid-run ends the leader's requests with an error naming it, and later ones too; a
// stopped follower is named when the exchange's deadline passes; a garbage or wrong-version
// hello, or a follower that answers garbage, is a clear error; no descriptor is leaked. A served
// follower refuses a model that is not the leader's (its identity), naming it.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ipc/frame.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"
#include "tests/weight-server/daemon/server_test_support.h"
#include "tests/worker/engine/engine_outcomes.h"
#include "tests/worker/engine/mixed_requests.h"
#include "tests/worker/engine/synth_models.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/cache_domain.h"
#include "worker/engine/profile.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/engine.h"
#include "worker/model_identity.h"
#include "worker/tp/follower.h"
#include "worker/tp/process_group.h"
#include "worker/tp/remote_kv_memory.h"
#include "worker/tp/tp_backend.h"
#include "worker/worker_model.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

// small_gqa_config with 4 KV heads, so 2 and 4 ranks both divide it.
struct Model {
  fs::path dir;
  std::shared_ptr<const HfModel> hf;
  std::shared_ptr<const WeightStore> store;
  std::string identity;
};

const Model& model() {
  static const Model m = [] {
    nlohmann::json config = test::small_gqa_config();
    config["num_key_value_heads"] = 4;
    Model m;
    m.dir = test::synth_dir("tp_process", test::synth_options("tiny-llama3", config));
    m.hf = std::make_shared<HfModel>(HfModel::open(m.dir));
    m.store = std::make_shared<HostStore>(m.hf);
    m.identity = model_identity(*m.hf);
    return m;
  }();
  return m;
}

EngineOptions options(int tp) {
  EngineOptions o = test::tp_engine_options(tp);
  o.backend = BackendKind::Cpu;
  o.kv_pool_tokens = 1 << 13;
  o.tensor_parallel_processes = true;
  return o;
}

std::unique_ptr<Backend> processes(int tp, const TpProcessOptions& p = {}) {
  const Model& m = model();
  return make_process_tp_backend(
      options(tp), EngineWeights{m.store, m.hf},
      {.dir = m.dir, .server_socket = {}, .model_name = {}, .identity = m.identity}, p);
}

std::unique_ptr<Backend> in_process(int tp) {
  EngineOptions o = options(tp);
  o.tensor_parallel_processes = false;
  return make_backend(o, EngineWeights{model().store, model().hf});
}

// The leader's group and backend, built here so a test can reach the followers' pids.
struct Group {
  std::shared_ptr<TpProcessGroup> group;
  std::unique_ptr<CpuBackend> backend;
};

Group start_group(int tp, milliseconds barrier_timeout) {
  const Model& m = model();
  const EngineOptions o = options(tp);
  const int context = resolve_context_length(o, m.store->config());
  const KvPoolShape kv =
      resolve_kv_pool(o, context, CpuBackend::kv_bytes_per_token(m.store->config()));
  TpHello hello;
  hello.world_size = tp;
  hello.model_dir = m.dir.string();
  hello.model_identity = m.identity;
  hello.context_length = context;
  hello.kv_block_size = kv.block_size;
  hello.kv_blocks = kv.num_blocks;
  TpProcessOptions p;
  p.barrier_timeout = barrier_timeout;
  Group g;
  g.group = TpProcessGroup::start(hello, p);
  g.backend = std::make_unique<CpuBackend>(m.store, context, kv, nullptr, tp,
                                           std::vector<std::shared_ptr<const WeightStore>>{},
                                           KvCacheDtype::Auto, g.group);
  return g;
}

int open_fds() {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) n += e.path().filename() != ".";
  return n;
}

std::vector<float> logits_of(Backend& b, const std::vector<int32_t>& prompt) {
  const std::span<const float> s = forward_alone(b, prompt);
  return {s.begin(), s.end()};
}

TEST(TpProcesses, LogitsAreTheInProcessRanksBitForBit) {
  const std::vector<int32_t> prompt = {5, 17, 2999, 1, 1500, 1499, 750, 42, 7};
  for (int tp : {2, 4}) {
    const std::vector<float> want = logits_of(*in_process(tp), prompt);
    const std::vector<float> got = logits_of(*processes(tp), prompt);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << "TP " << tp;
  }
}

TEST(TpProcesses, TokensAndLogprobsAreTheInProcessRanksAloneAndBatched) {
  const std::vector<Request> requests = test::tp_mixed_requests(5, 3000, 26);
  for (int tp : {2, 4}) {
    const EngineOptions o = options(tp);
    const auto reference = in_process(tp);
    const auto want = test::run_engine(*reference, o, requests);
    const auto backend = processes(tp);
    test::expect_same_outcomes(test::run_engine(*backend, o, requests), want,
                               "TP " + std::to_string(tp) + " batched");
    test::expect_same_outcomes(test::run_each_alone(*backend, o, requests), want,
                               "TP " + std::to_string(tp) + " alone");
  }
}

// The requests' errors once `kill_after` steps have run and then rank 1 was killed.
std::vector<std::string> errors_after_a_kill(Group& g, int kill_after, int signal) {
  Engine engine(*g.backend, options(2), nullptr, {});
  for (const Request& r : test::tp_mixed_requests(4, 3000, 7)) engine.submit(r);
  std::vector<std::string> errors;
  for (int step = 0; engine.has_work(); ++step) {
    if (step == kill_after) ::kill(g.group->follower_pid(1), signal);
    for (const RequestOutput& out : engine.step())
      if (out.finish) {
        EXPECT_EQ(out.finish->reason, FinishReason::Error) << out.id;
        errors.push_back(out.finish->error);
      }
  }
  return errors;
}

TEST(TpProcesses, AKilledFollowerFailsTheLeadersRequestsNamingIt) {
  Group g = start_group(2, milliseconds(60'000));
  const std::vector<std::string> errors = errors_after_a_kill(g, 2, SIGKILL);
  ASSERT_EQ(errors.size(), 4u);
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("tensor-parallel rank 1 (pid "), std::string::npos) << e;
    EXPECT_NE(e.find("killed by signal 9"), std::string::npos) << e;
  }
  // The backend says it can run no more (a serving worker stops on it), and later requests
  // fail the same way: the group is gone for good.
  EXPECT_NE(g.backend->failure().find("killed by signal 9"), std::string::npos);
  Engine engine(*g.backend, options(2), nullptr, {});
  engine.submit(test::tp_mixed_requests(1, 3000, 8)[0]);
  std::string later;
  while (engine.has_work())
    for (const RequestOutput& out : engine.step())
      if (out.finish) later = out.finish->error;
  EXPECT_NE(later.find("killed by signal 9"), std::string::npos) << later;
}

TEST(TpProcesses, AStoppedFollowerIsNamedAtTheExchangesDeadline) {
  Group g = start_group(2, milliseconds(300));
  const std::vector<std::string> errors = errors_after_a_kill(g, 1, SIGSTOP);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("tensor-parallel rank 1 did not reach the exchange within 300 ms"),
            std::string::npos)
      << errors[0];
  ::kill(g.group->follower_pid(1), SIGKILL);  // the group's destructor reaps it
}

// run_tp_follower on one end of a socketpair, `hello` sent on the other: the follower's error.
std::string follower_refuses(const std::string& raw_bytes) {
  int ends[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends), 0);
  UniqueFd leader(ends[0]);
  std::string why;
  std::thread follower([&, end = ends[1]] {
    why = test::error_of([&] {
      run_tp_follower(UniqueFd(end), [](const TpHello&) -> std::shared_ptr<const WeightStore> {
        throw std::runtime_error("no model should be opened");
      });
    });
  });
  EXPECT_EQ(::send(leader.get(), raw_bytes.data(), raw_bytes.size(), MSG_NOSIGNAL),
            ssize_t(raw_bytes.size()));
  // The follower tells the leader why before it gives up.
  std::optional<ipc::Frame> told;
  try {
    told = ipc::receive_frame(leader.get(), {.timeout = milliseconds(10'000)});
  } catch (const std::exception&) {
  }
  leader.reset();
  follower.join();
  EXPECT_TRUE(told && told->body.value("type", "") == "error" &&
              told->body.value("message", "") == why)
      << why;
  return why;
}

TEST(TpProcesses, AFollowerRefusesAGarbageOrWrongVersionHello) {
  TpHello hello;
  hello.rank = 1;
  hello.world_size = 2;
  hello.context_length = 64;
  hello.kv_block_size = 16;
  hello.kv_blocks = 4;
  hello.barrier_timeout_ms = 1000;
  hello.model_dir = "/nonexistent";
  nlohmann::json wrong = hello_message(hello);
  wrong["protocol"] = 99;
  EXPECT_NE(follower_refuses(ipc::encode_frame(wrong)).find("the leader speaks protocol 99"),
            std::string::npos);
  nlohmann::json bad_rank = hello_message(hello);
  bad_rank["rank"] = 2;
  EXPECT_NE(
      follower_refuses(ipc::encode_frame(bad_rank)).find("\"rank\" must be an integer in [1, 1]"),
      std::string::npos);
  EXPECT_NE(follower_refuses(ipc::encode_frame({{"type", "forward"}}))
                .find("expected a hello, got a message of type \"forward\""),
            std::string::npos);
  nlohmann::json no_model = hello_message(hello);
  no_model["model_dir"] = "";
  EXPECT_NE(follower_refuses(ipc::encode_frame(no_model))
                .find("must name a model directory, or a server socket and a model name"),
            std::string::npos);
  // A hello without the exchange's descriptor.
  EXPECT_NE(follower_refuses(ipc::encode_frame(hello_message(hello)))
                .find("the hello must carry the exchange's descriptor"),
            std::string::npos);
  // Not a frame at all: a length, then bytes that are not JSON.
  const std::string garbage = std::string("\x05\x00\x00\x00", 4) + "}{!?x";
  EXPECT_NE(follower_refuses(garbage), "(no error)");
}

TEST(TpProcesses, ALeaderRefusesAFollowerThatAnswersGarbage) {
  const fs::path dir = test::process_scratch_dir() / "tp_garbage";
  fs::create_directories(dir);
  const fs::path liar = dir / "liar.sh";
  std::ofstream(liar) << "#!/bin/sh\nprintf 'not a frame at all' >&0\nsleep 30\n";
  fs::permissions(liar, fs::perms::owner_all);
  const fs::path quitter = dir / "quitter.sh";
  std::ofstream(quitter) << "#!/bin/sh\nexit 3\n";
  fs::permissions(quitter, fs::perms::owner_all);
  const int before = open_fds();
  TpProcessOptions p;
  p.follower_binary = liar;
  p.start_timeout = milliseconds(20'000);
  const std::string lie = test::error_of([&] { processes(2, p); });
  EXPECT_NE(lie.find("tensor-parallel rank 1 (pid "), std::string::npos) << lie;
  p.follower_binary = quitter;
  const std::string quit = test::error_of([&] { processes(2, p); });
  EXPECT_NE(quit.find("tensor-parallel rank 1 (pid "), std::string::npos) << quit;
  EXPECT_NE(quit.find("exit status 3"), std::string::npos) << quit;
  EXPECT_EQ(open_fds(), before);
  fs::remove_all(dir);
}

TEST(TpProcesses, LeaksNoDescriptors) {
  model();  // opened once, outside the count
  const int before = open_fds();
  {
    const auto backend = processes(4);
    logits_of(*backend, {1, 2, 3});
  }
  {
    Group g = start_group(2, milliseconds(60'000));
    errors_after_a_kill(g, 1, SIGKILL);
  }
  EXPECT_EQ(open_fds(), before);
}

TEST(TpProcesses, IsAnEngineProfileKeyOutsideTheCacheDomain) {
  EXPECT_TRUE(parse_engine_profile(R"({"tensor_parallel_processes": true})", "p")
                  .engine.tensor_parallel_processes);
  EXPECT_FALSE(parse_engine_profile("{}", "p").engine.tensor_parallel_processes);
  EXPECT_THROW(parse_engine_profile(R"({"tensor_parallel_processes": 1})", "p"),
               std::runtime_error);
  EngineOptions a = options(2), b = options(2);
  b.tensor_parallel_processes = false;
  EXPECT_EQ(cache_domain_key(a, "cpu", "m"), cache_domain_key(b, "cpu", "m"));
}

// Every rank of a served group imports one rank's pieces, and every one of them is named by the
// whole model: the identity the leader got importing rank 0 is the one rank 1's follower gets,
// and a hello naming another is refused by the follower, by name; so is a server it cannot reach.
TEST(TpProcesses, AServedFollowerRefusesAModelThatIsNotTheLeaders) {
  test::ServerProcess server({"--backend", "memfd", "--quiet", "--tensor-parallel", "2", "--model",
                              test::tiny_model_dir().string() + ":tiny"});
  ServedModelOptions rank0;
  rank0.rank = 0;
  const WorkerModel leader = attach_served_model(server.socket(), "tiny", rank0);
  TpHello hello;
  hello.world_size = 2;
  hello.server_socket = server.socket();
  hello.model_name = "tiny";
  hello.model_identity = leader.identity;
  hello.context_length = 64;
  hello.kv_block_size = 16;
  hello.kv_blocks = 8;
  EXPECT_NO_THROW(TpProcessGroup::start(hello, {}));
  hello.model_identity = "served:another-model";
  const std::string why = test::error_of([&] { TpProcessGroup::start(hello, {}); });
  EXPECT_NE(why.find("tensor-parallel rank 1 failed"), std::string::npos) << why;
  EXPECT_NE(why.find("is not the one the leader imported"), std::string::npos) << why;
  EXPECT_NE(why.find("served:another-model"), std::string::npos) << why;
  // A follower that cannot reach the server fails the start, naming the rank and the cause.
  hello.model_identity = leader.identity;
  hello.server_socket = (fs::path(server.socket()).parent_path() / "nobody.sock").string();
  const std::string unreachable = test::error_of([&] { TpProcessGroup::start(hello, {}); });
  EXPECT_NE(unreachable.find("tensor-parallel rank 1 failed"), std::string::npos) << unreachable;
  EXPECT_NE(unreachable.find("not running at"), std::string::npos) << unreachable;
}

// A follower's leased pool as the leader sees it (RemoteKvMemory) is only its answers over the
// channel: a follower that cannot answer a kv_grow (a CPU rank leases nothing, so it gives up)
// breaks the group, and the error names the rank and why, as a dead one at a step does.
TEST(TpProcesses, ARemotePoolsFollowerThatCannotResizeIsNamed) {
  Group g = start_group(2, milliseconds(60'000));
  const TpKvState start{16, 64, 8, 2, 4096, 2 * 8 * 4096};
  RemoteKvMemory remote(g.group, 1, start, milliseconds(20'000));
  EXPECT_EQ(remote.blocks(), 16);
  EXPECT_EQ(remote.max_blocks(), 64);
  EXPECT_EQ(remote.base(), nullptr);  // the blocks live in the follower's process
  EXPECT_EQ(remote.grow(0), 0);       // nothing asked, nothing sent
  const std::string why = test::error_of([&] { remote.grow(8); });
  EXPECT_NE(why.find("tensor-parallel rank 1 (pid " + std::to_string(g.group->follower_pid(1)) +
                     ") failed"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("kv_grow"), std::string::npos) << why;
  EXPECT_EQ(remote.blocks(), 16);  // unchanged: no answer came
  EXPECT_EQ(g.group->failure(), why);
  EXPECT_NE(test::error_of([&] { remote.shrink(8); }), "(no error)");
}

}  // namespace
}  // namespace hearth
