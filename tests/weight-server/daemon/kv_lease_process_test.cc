// Served workers on KV leased from hearth-server (issue 22), as real processes: hearth-server
// with a small memory budget (memfd, --memory-mb) and hearth-worker --server runs on the CPU
// engine. The budget is shared and never passed, every request finishes, a worker that waits for
// memory runs once another gives it back, a dead worker's lease returns when its connection
// closes, and leased pools give the tokens a worker's own pool gives.
#include <gtest/gtest.h>

#include <signal.h>

#include <fstream>
#include <map>
#include <optional>

#include "kv_lease_test_support.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using test::ServerProcess;
using test::TempDir;

// The tiny model's KV chunk is 10 MiB (1024 positions); one context (512) takes one chunk. These
// requests take ~1,300 positions in all, so a worker running them at once grows to two chunks.
std::string write_requests(const TempDir& dir, const std::string& name, int count = 8) {
  return test::write_growing_requests(dir, name, count);
}

// Leases alone: with kv_share on, chunks holding published prefix blocks outlive their worker
// as the server's until a lease needs the memory (kv_share_process_test.cc tests that).
std::vector<std::string> served_args(const ServerProcess& server, const std::string& requests) {
  return {"--server",   server.socket(), "--model",  "tiny",  "--backend", "cpu",
          "--requests", requests,        "--format", "jsonl", "--set",     "kv_share=false"};
}

// Each request's final event, by id; fails the test unless every one finished by length.
std::map<std::string, json> finishes(const std::string& out, int expected) {
  std::map<std::string, json> done;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) {
    const json e = json::parse(line, nullptr, false);
    if (e.is_object() && e.contains("done")) done[e.value("id", "")] = e;
  }
  EXPECT_EQ(int(done.size()), expected) << out.substr(0, 2000);
  for (const auto& [id, e] : done) EXPECT_EQ(e.value("stop", ""), "length") << e.dump();
  return done;
}

// Runs `n` workers at once over `requests`, sampling the server's accounting until they end:
// weights and KV together never pass the limit. Returns their stdouts.
std::vector<std::string> run_workers_sharing(ServerProcess& server, const TempDir& dir, int n,
                                             const std::string& requests) {
  std::vector<std::string> argv = {test::binary("hearth-worker")};
  for (const std::string& a : served_args(server, requests)) argv.push_back(a);
  std::vector<ChildProcess> workers = test::spawn_workers(argv, dir, n);
  uint64_t peak = 0;
  int samples = 0;
  const auto deadline = test::patience_deadline() + std::chrono::minutes(4);
  while (test::any_running(workers) && std::chrono::steady_clock::now() < deadline) {
    const json m = server.stats()["memory"];
    const uint64_t used = m["weights_bytes"].get<uint64_t>() + m["kv_bytes"].get<uint64_t>();
    EXPECT_LE(used, m["limit_bytes"].get<uint64_t>()) << m.dump();
    peak = std::max(peak, m["kv_bytes"].get<uint64_t>());
    ++samples;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::string> outs;
  for (int i = 0; i < n; ++i) {
    const ExitStatus st = workers[i].wait();
    const std::string base = dir / ("w" + std::to_string(i));
    EXPECT_TRUE(st.exited_with(0)) << test::read_file(base + ".err");
    outs.push_back(test::read_file(base + ".out"));
  }
  EXPECT_GT(samples, 0);
  EXPECT_GT(peak, 0u);
  return outs;
}

using test::wait_for_stats;
using test::worker_entry;

const std::vector<std::string> kBudget(uint64_t memory_mb) {
  return test::kv_budget_args(memory_mb);
}

// Two workers on a budget of three chunks beside the weights: both finish every request, and
// their tokens are those of the same requests on a worker's own pool (single-process).
TEST(KvLeaseProcess, TwoWorkersShareABudgetWithTheSameTokensAsTheirOwnPools) {
  ServerProcess server(kBudget(100));
  TempDir dir;
  const std::string requests = write_requests(dir, "requests.jsonl");
  const std::vector<std::string> outs = run_workers_sharing(server, dir, 2, requests);
  const test::WorkerRun alone =
      test::run_worker(dir, {"--model", test::tiny_model_dir().string(), "--backend", "cpu",
                             "--requests", requests, "--format", "jsonl"});
  ASSERT_TRUE(alone.status.exited_with(0)) << alone.err;
  const std::map<std::string, json> reference = finishes(alone.out, 8);
  auto tokens_of = [](const std::string& out) {
    std::map<std::string, std::vector<std::string>> by_id;
    std::stringstream ss(out);
    for (std::string line; std::getline(ss, line);) {
      json e = json::parse(line, nullptr, false);
      if (e.is_object() && e.contains("token")) by_id[e["id"]].push_back(line);
    }
    return by_id;
  };
  for (const std::string& out : outs) {
    finishes(out, 8);
    EXPECT_EQ(tokens_of(out), tokens_of(alone.out));
  }
  const json after =
      wait_for_stats(server, [](const json& s) { return s["memory"]["kv_bytes"] == 0; });
  EXPECT_EQ(after["memory"]["kv_bytes"], 0);
  EXPECT_GE(after["kv_chunks_total"].get<uint64_t>(), 3u);  // someone grew past its first chunk
}

// Eight workers on a budget of eleven chunks: their minimums fit, growth is first come first
// served, and every request of every worker finishes.
TEST(KvLeaseProcess, EightWorkersShareABudgetAndAllFinish) {
  ServerProcess server(kBudget(256));
  TempDir dir;
  const std::string requests = write_requests(dir, "requests.jsonl");
  for (const std::string& out : run_workers_sharing(server, dir, 8, requests)) finishes(out, 8);
  const json after =
      wait_for_stats(server, [](const json& s) { return s["memory"]["kv_bytes"] == 0; });
  EXPECT_EQ(after["memory"]["kv_bytes"], 0);
  // Eight minimums, and three chunks more that went to workers whose requests lacked blocks.
  EXPECT_GT(after["kv_chunks_total"].get<uint64_t>(), 8u);
}

// A serving worker holds its lease while idle; killed, its lease returns because its
// connection closed, and a worker that waited for that memory then runs its requests.
TEST(KvLeaseProcess, AKilledWorkersLeaseReturnsAndAWaitingWorkerRuns) {
  // One chunk beside the weights: the first worker's minimum takes it all.
  ServerProcess server(kBudget(56));
  TempDir dir;
  ChildProcess holder = ChildProcess::spawn(
      ChildProcess::Options({test::binary("hearth-worker"), "--server", server.socket(), "--model",
                             "tiny", "--backend", "cpu", "--serve", dir / "holder.sock"})
          .stderr_to(ChildProcess::Stream::file(dir / "holder.err")));
  json s = wait_for_stats(server, [&](const json& st) {
    auto w = worker_entry(st, holder.pid());
    return w && (*w)["kv"]["chunks"] == 1;
  });
  ASSERT_TRUE(worker_entry(s, holder.pid())) << s.dump() << test::read_file(dir / "holder.err");
  ASSERT_EQ(s["memory"]["free_bytes"].get<uint64_t>() / (10u << 20), 0u) << s["memory"].dump();
  // The worker's own stats report its lease: one chunk of 64 blocks (16 positions each).
  std::optional<ipc::Client> holder_client = test::connect_when_listening(dir / "holder.sock");
  ASSERT_TRUE(holder_client) << test::read_file(dir / "holder.err");
  const json lease = holder_client->call(ipc::op::kStats).body["kv_lease"];
  EXPECT_EQ(lease["chunks"], 1) << lease.dump();
  EXPECT_EQ(lease["bytes"], 10u << 20);
  EXPECT_EQ(lease["blocks"], 64);
  holder_client.reset();

  const std::string requests = write_requests(dir, "requests.jsonl", 2);
  std::vector<std::string> argv = {test::binary("hearth-worker")};
  for (const std::string& a : served_args(server, requests)) argv.push_back(a);
  ChildProcess waiter =
      ChildProcess::spawn(ChildProcess::Options(argv)
                              .stdout_to(ChildProcess::Stream::file(dir / "waiter.out"))
                              .stderr_to(ChildProcess::Stream::file(dir / "waiter.err")));
  // The waiter attached (it holds the weights) and got no KV: its requests wait.
  s = wait_for_stats(server,
                     [&](const json& st) { return worker_entry(st, waiter.pid()).has_value(); });
  const std::optional<json> w = worker_entry(s, waiter.pid());
  ASSERT_TRUE(w) << s.dump() << test::read_file(dir / "waiter.err");
  EXPECT_EQ((*w)["kv"]["chunks"], 0);
  EXPECT_TRUE(waiter.running());

  ASSERT_EQ(::kill(holder.pid(), SIGKILL), 0);
  holder.wait();
  s = wait_for_stats(server, [&](const json& st) { return !worker_entry(st, holder.pid()); });
  EXPECT_FALSE(worker_entry(s, holder.pid())) << s.dump();

  const ExitStatus st = waiter.wait();
  EXPECT_TRUE(st.exited_with(0)) << test::read_file(dir / "waiter.err");
  finishes(test::read_file(dir / "waiter.out"), 2);
  s = wait_for_stats(server, [](const json& st) { return st["memory"]["kv_bytes"] == 0; });
  EXPECT_EQ(s["memory"]["kv_bytes"], 0);
  EXPECT_EQ(s["kv_chunks"], 0);
}

// Single-process mode keeps its own pool, sized as before: no lease, and the CPU default of
// max_running (256) contexts of 512 capped at 1 GiB of fp32 KV (10,240 bytes a position).
TEST(KvLeaseProcess, ASingleProcessWorkerKeepsItsOwnPool) {
  TempDir dir;
  ChildProcess worker =
      ChildProcess::spawn(ChildProcess::Options({test::binary("hearth-worker"), "--model",
                                                 test::tiny_model_dir().string(), "--backend",
                                                 "cpu", "--serve", dir / "w.sock"})
                              .stderr_to(ChildProcess::Stream::file(dir / "w.err")));
  std::optional<ipc::Client> client;
  for (auto deadline = test::patience_deadline();
       !client && worker.running() && std::chrono::steady_clock::now() < deadline;) {
    try {
      client.emplace(test::connect_client(dir / "w.sock"));
    } catch (const ipc::IpcError&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ASSERT_TRUE(client) << test::read_file(dir / "w.err");
  const json stats = client->call(ipc::op::kStats).body;
  EXPECT_FALSE(stats.contains("kv_lease")) << stats.dump();
  EXPECT_EQ(stats["kv_blocks_total"], ((int64_t(1) << 30) / 10240 + 15) / 16);
  client.reset();
  ::kill(worker.pid(), SIGTERM);
  worker.wait();
}

}  // namespace
}  // namespace hearth
