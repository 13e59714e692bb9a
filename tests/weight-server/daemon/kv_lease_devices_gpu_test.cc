// KV leases per GPU (issue 26): a CUDA TP=2 worker served by `hearth-server --backend vmm
// --tensor-parallel 2` leases rank r's KV pool from GPU r's budget, as VMM chunks created on that
// GPU; its tokens are those of the same engine on pools of its own; SIGKILLed, both GPUs' chunks
// return. Skipped with fewer than 2 GPUs.
#include <gtest/gtest.h>

#include <signal.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kv_lease_test_support.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using test::ServerProcess;

using test::wait_for_stats;
using test::worker_entry;

// The token ids of a jsonl run, in order.
std::vector<int64_t> tokens_of(const std::string& out) {
  std::vector<int64_t> ids;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) {
    const json e = json::parse(line, nullptr, false);
    if (e.is_object() && e.contains("token")) ids.push_back(e["token"].get<int64_t>());
  }
  return ids;
}

TEST(KvLeaseDevicesGpu, ATensorParallelCudaWorkerLeasesEachRanksPoolOnItsGpu) {
  if (vmm_device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, this machine has " << vmm_device_count();
  ServerProcess server({"--backend", "vmm", "--model", test::tiny_model_dir().string() + ":tiny",
                        "--tensor-parallel", "2"});
  test::TempDir dir;
  const json before = server.stats();
  ASSERT_EQ(before["kv_devices"].size(), 2u) << before.dump();
  for (size_t d = 0; d < 2; ++d) EXPECT_EQ(before["kv_devices"][d]["gpu"], d);

  // generation_args names the backend of the one-shot runs. No prefix sharing: published
  // blocks would keep their chunks past the workers, and the leases must all come back.
  const std::vector<std::string> engine = {"--set", "tensor_parallel=2", "--set", "kv_share=false"};
  std::vector<std::string> argv = {test::binary("hearth-worker"),
                                   "--server",
                                   server.socket(),
                                   "--model",
                                   "tiny",
                                   "--backend",
                                   "cuda",
                                   "--serve",
                                   dir / "w.sock"};
  argv.insert(argv.end(), engine.begin(), engine.end());
  ChildProcess holder = ChildProcess::spawn(
      ChildProcess::Options(argv).stderr_to(ChildProcess::Stream::file(dir / "w.err")));
  json s = wait_for_stats(server, [&](const json& st) {
    const auto w = worker_entry(st, holder.pid());
    return w && test::kv_chunks_on(*w, 0) > 0 && test::kv_chunks_on(*w, 1) > 0;
  });
  const std::optional<json> w = worker_entry(s, holder.pid());
  ASSERT_TRUE(w) << s.dump() << test::read_file(dir / "w.err");
  // One context on each GPU: every rank holds the same blocks, its own heads of them.
  EXPECT_EQ(test::kv_chunks_on(*w, 0), test::kv_chunks_on(*w, 1)) << w->dump();
  EXPECT_EQ(s["kv_devices"][0]["kv_bytes"], s["kv_devices"][1]["kv_bytes"]) << s.dump();

  // Leased pools give the tokens of pools of the worker's own (single-process, the same
  // engine on the model directory).
  std::vector<std::string> served = {"--server", server.socket(), "--model", "tiny"};
  std::vector<std::string> alone = {"--model", test::tiny_model_dir().string()};
  for (auto* args : {&served, &alone}) {
    args->insert(args->end(), engine.begin(), engine.end());
    for (const std::string& a : test::generation_args(7, 48, true, "cuda")) args->push_back(a);
  }
  const test::WorkerRun a = test::run_worker(dir, served);
  const test::WorkerRun b = test::run_worker(dir, alone);
  ASSERT_TRUE(a.status.exited_with(0)) << a.err;
  ASSERT_TRUE(b.status.exited_with(0)) << b.err;
  EXPECT_EQ(tokens_of(a.out).size(), 48u) << a.out;
  EXPECT_EQ(tokens_of(a.out), tokens_of(b.out));

  ASSERT_EQ(::kill(holder.pid(), SIGKILL), 0);
  holder.wait();
  s = wait_for_stats(server, [&](const json& st) { return st["kv_chunks"] == 0; });
  EXPECT_EQ(s["kv_chunks"], 0) << s.dump();
  EXPECT_EQ(s["kv_devices"][0]["kv_bytes"], 0);
  EXPECT_EQ(s["kv_devices"][1]["kv_bytes"], 0);
  EXPECT_NE(server.log().find("(pid " + std::to_string(holder.pid()) + ", "), std::string::npos)
      << server.log();
}

}  // namespace
}  // namespace hearth
