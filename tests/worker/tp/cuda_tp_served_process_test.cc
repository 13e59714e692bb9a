// GPU tensor-parallel ranks as processes on a served model (issue 26): hearth-server --backend
// vmm --tensor-parallel 2 holds each rank's pieces on its GPU; a CUDA worker with
// tensor_parallel_processes imports rank 0's, its hearth-tp-follower imports rank 1's on GPU 1,
// and each leases its KV pool from its own GPU's budget. The token lines (ids, text, logprob bits
// as printed) are those of the served in-process ranks and of local processes, alone and
// batched, bf16 and fp8; a follower SIGKILLed between requests stops the worker, which names it,
// and the server takes both ranks' chunks back. Skips with fewer than 2 GPUs (fp8: or off compute
// capability 9.0).
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/weight-server/daemon/kv_lease_test_support.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using test::concat;
using test::ServerProcess;
using test::wait_for_stats;
using test::worker_entry;

// No prefix sharing for the in-process workers either: published blocks would keep their chunks
// past them, and these tests check that every lease comes back.
const std::vector<std::string> kTp2 = {"--set", "tensor_parallel=2", "--set", "kv_share=false"};
const std::vector<std::string> kProcesses = {"--set", "tensor_parallel_processes=true"};

#define REQUIRE_TWO_GPUS()    \
  if (vmm_device_count() < 2) \
  GTEST_SKIP() << "needs 2 GPUs, this machine has " << vmm_device_count()

std::vector<std::string> vmm_server_args(const std::vector<std::string>& extra = {}) {
  return concat({"--backend", "vmm", "--tensor-parallel", "2", "--model",
                 test::tiny_model_dir().string() + ":tiny"},
                extra);
}

std::vector<std::string> served(const ServerProcess& server) {
  return {"--server", server.socket(), "--model", "tiny"};
}

std::vector<std::string> local() {
  return {"--model", test::tiny_model_dir().string()};
}

// The token lines of one prompt (a sampled continuation, so the seed and the logits matter).
std::vector<std::string> tokens(const test::TempDir& dir, const std::vector<std::string>& args) {
  const test::WorkerRun run =
      test::run_worker(dir, concat(concat(args, test::generation_args(7, 48, true, "cuda")), kTp2));
  EXPECT_TRUE(run.status.exited_with(0)) << run.err;
  return test::parse_stream(run.out).tokens;
}

// Several sampled requests in one engine: each request's token lines, by id.
std::map<std::string, std::vector<std::string>> batched(const test::TempDir& dir,
                                                        const std::vector<std::string>& args) {
  const std::string requests = test::write_growing_requests(dir, "batch.jsonl", 6);
  const test::WorkerRun run = test::run_worker(
      dir, concat(concat(args, {"--requests", requests, "--backend", "cuda"}), kTp2));
  EXPECT_TRUE(run.status.exited_with(0)) << run.err;
  std::map<std::string, std::vector<std::string>> out;
  std::stringstream ss(run.out);
  for (std::string line; std::getline(ss, line);) {
    const json e = json::parse(line, nullptr, false);
    if (e.is_object() && e.contains("token")) out[e.value("id", "")].push_back(line);
  }
  return out;
}

TEST(CudaTpServedProcesses, AreTheServedInProcessRanksAndLocalProcessesAloneAndBatched) {
  REQUIRE_TWO_GPUS();
  ServerProcess server(vmm_server_args());
  const test::TempDir& dir = server.dir();
  const std::vector<std::string> want = tokens(dir, served(server));
  ASSERT_EQ(want.size(), 48u);
  EXPECT_EQ(tokens(dir, concat(served(server), kProcesses)), want);
  EXPECT_EQ(tokens(dir, concat(local(), kProcesses)), want);

  const auto want_batched = batched(dir, served(server));
  ASSERT_EQ(want_batched.size(), 6u);
  EXPECT_EQ(batched(dir, concat(served(server), kProcesses)), want_batched);
  EXPECT_EQ(batched(dir, concat(local(), kProcesses)), want_batched);
  // Every lease went back with its worker.
  const json s = wait_for_stats(server, [](const json& st) { return st["kv_chunks"] == 0; });
  EXPECT_EQ(s["kv_chunks"], 0) << s.dump();
}

TEST(CudaTpServedProcesses, EachRankLeasesOnItsGpuAndAKilledFollowerIsNamedAndReturnsIt) {
  REQUIRE_TWO_GPUS();
  ServerProcess server(vmm_server_args());
  const test::TempDir& dir = server.dir();
  const std::string socket = dir / "w.sock";
  std::optional<test::ServedTpPair> group = test::start_served_tp_pair(
      concat(concat(concat({test::binary("hearth-worker")}, served(server)),
                    {"--backend", "cuda", "--serve", socket, "--quiet"}),
             concat(kTp2, kProcesses)),
      socket, dir / "w.err");
  ASSERT_TRUE(group) << test::read_file(dir / "w.err");
  ChildProcess& leader = group->leader;
  std::optional<ipc::Client>& client = group->client;
  const pid_t follower = group->follower;

  // Rank 0's pool on GPU 0 only, rank 1's on GPU 1 only, as many chunks each.
  const test::RankPools pools = test::wait_for_rank_pools(server, leader.pid(), follower);
  json s = pools.stats;
  const std::optional<json>& l = pools.leader;
  const std::optional<json>& f = pools.follower;
  ASSERT_TRUE(l && f) << s.dump() << test::read_file(dir / "w.err");
  EXPECT_EQ(test::kv_chunks_on(*l, 1), 0u) << l->dump();
  EXPECT_EQ(test::kv_chunks_on(*f, 0), 0u) << f->dump();
  EXPECT_EQ(test::kv_chunks_on(*l, 0), test::kv_chunks_on(*f, 1)) << s.dump();
  EXPECT_EQ(s["kv_devices"][0]["kv_bytes"], s["kv_devices"][1]["kv_bytes"]) << s.dump();
  const uint64_t follower_chunks = test::kv_chunks_on(*f, 1);
  // The worker's own stats count both ranks' chunks.
  EXPECT_EQ(client->call(ipc::op::kStats).body["kv_lease"]["chunks"], 2 * follower_chunks);

  // The follower dies between requests (dying mid-step is CudaTpProcessesFault's case): its
  // connection closes with it, and the server takes its chunks back and says so.
  ASSERT_EQ(::kill(follower, SIGKILL), 0);
  s = wait_for_stats(server, [&](const json& st) { return !worker_entry(st, follower); });
  EXPECT_FALSE(worker_entry(s, follower)) << s.dump();
  EXPECT_NE(server.log().find("(pid " + std::to_string(follower) + ", " +
                              std::to_string(follower_chunks) + " chunks) returned: disconnected"),
            std::string::npos)
      << server.log();
  // The worker, idle, finds the dead follower itself (its idle probe; no request is sent) and
  // exits as a failure naming the rank and how it ended, for its supervisor to restart.
  client.reset();
  const auto status = leader.wait_until(std::chrono::steady_clock::now() + 60s);
  ASSERT_TRUE(status) << "the worker did not stop";
  EXPECT_FALSE(status->success());
  const std::string err = test::read_file(dir / "w.err");
  EXPECT_NE(err.find("tensor-parallel rank 1 (pid " + std::to_string(follower) + ")"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("killed by signal 9"), std::string::npos) << err;
  s = wait_for_stats(server, [](const json& st) { return st["kv_chunks"] == 0; });
  EXPECT_EQ(s["kv_devices"][0]["kv_bytes"], 0) << s.dump();
  EXPECT_EQ(s["kv_devices"][1]["kv_bytes"], 0) << s.dump();
}

// fp8 (issue 25): the server quantizes at load and puts each rank's fp8 pieces on its GPU;
// processes give the in-process ranks' bits, served and local (--quantize fp8).
TEST(CudaTpServedProcesses, Fp8ProcessesAreTheFp8InProcessRanks) {
  REQUIRE_TWO_GPUS();
  ServerProcess server(vmm_server_args({"--quantize", "fp8"}));
  const test::TempDir& dir = server.dir();
  const test::WorkerRun probe = test::run_worker(
      dir, concat(concat(served(server), test::generation_args(7, 48, true, "cuda")), kTp2));
  if (probe.err.find("compute capability 9.0") != std::string::npos) GTEST_SKIP() << probe.err;
  ASSERT_TRUE(probe.status.exited_with(0)) << probe.err;
  const std::vector<std::string> want = test::parse_stream(probe.out).tokens;
  ASSERT_EQ(want.size(), 48u);
  EXPECT_EQ(tokens(dir, concat(served(server), kProcesses)), want);
  const std::vector<std::string> quantize = {"--quantize", "fp8"};
  const std::vector<std::string> local_fp8 = tokens(dir, concat(local(), quantize));
  EXPECT_EQ(tokens(dir, concat(concat(local(), quantize), kProcesses)), local_fp8);
  EXPECT_EQ(local_fp8, want);  // the server's pieces are the local quantization's slices
  EXPECT_EQ(batched(dir, concat(served(server), kProcesses)), batched(dir, served(server)));
}

}  // namespace
}  // namespace hearth
