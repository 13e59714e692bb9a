// KV leases per device (issue 26): a tensor-parallel hearth-server (memfd, so CI takes the path
// the vmm GPUs take) keeps one budget per rank's device. Leases name their device, each device's
// budget is accounted and reported on its own, a full device gives nothing while another still
// gives, a bad device index is a clear error, and a closed connection returns every device's
// chunks. CPU ranks as processes (tensor_parallel_processes) lease the same way: rank r's pool
// from device r, the follower's under its own connection.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kv_lease_test_support.h"
#include "tests/support/child_pids.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using test::ServerProcess;

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr uint64_t kChunk = 2 * kMiB;

std::vector<std::string> tp_server_args(int ranks, uint64_t memory_mb) {
  return test::kv_budget_args(memory_mb, ranks);
}

ipc::Frame lease(ipc::Client& c, uint64_t device, uint64_t chunks, uint64_t min_chunks = 0) {
  ipc::KvLeaseRequest request{kChunk, chunks, min_chunks, device};
  return c.call(ipc::op::kKvLease, ipc::make_kv_lease_args(request));
}

size_t granted(const ipc::Frame& f) {
  return f.body.at("chunks").size();
}

uint64_t kv_on(const json& stats, size_t device) {
  return stats.at("kv_devices").at(device).at("kv_bytes").get<uint64_t>();
}

using test::wait_for_stats;
using test::worker_entry;

TEST(KvLeaseDevices, EachRanksDeviceHasItsOwnBudget) {
  ServerProcess server(tp_server_args(2, 100));
  const json before = server.stats();
  ASSERT_EQ(before["kv_devices"].size(), 2u) << before.dump();
  uint64_t weights = 0;
  for (size_t d = 0; d < 2; ++d) {
    const json& dev = before["kv_devices"][d];
    EXPECT_EQ(dev["device"], d);
    EXPECT_EQ(dev["limit_bytes"], 50 * kMiB);
    EXPECT_GT(dev["weights_bytes"].get<uint64_t>(), 0u);  // rank d's pieces
    EXPECT_EQ(dev["kv_bytes"], 0);
    EXPECT_FALSE(dev.contains("gpu"));  // memfd: host memory
    weights += dev["weights_bytes"].get<uint64_t>();
  }
  EXPECT_EQ(weights, before["allocation_bytes"].get<uint64_t>());
  EXPECT_EQ(before["memory"], [&] {  // device 0's, as a server of one device reports it
    json m = before["kv_devices"][0];
    m.erase("device");
    return m;
  }());

  ipc::Client a = test::connect_client(server.socket(), "a");
  const ipc::Frame on_one = lease(a, 1, 3);
  EXPECT_EQ(on_one.body["device"], 1);
  ASSERT_EQ(granted(on_one), 3u);
  ASSERT_EQ(granted(lease(a, 0, 2)), 2u);
  json stats = server.stats();
  EXPECT_EQ(kv_on(stats, 0), 2 * kChunk);
  EXPECT_EQ(kv_on(stats, 1), 3 * kChunk);
  EXPECT_EQ(stats["memory"]["kv_bytes"], 2 * kChunk);
  ASSERT_EQ(stats["workers"].size(), 1u);
  const json& kv = stats["workers"][0]["kv"];
  EXPECT_EQ(kv["bytes"], 5 * kChunk);
  EXPECT_EQ(kv["devices"], json::parse(R"([{"device": 0, "chunks": 2, "bytes": 4194304},
                                           {"device": 1, "chunks": 3, "bytes": 6291456}])"));

  // b takes everything device 1 has left: c then gets nothing there, and device 0 still gives.
  ipc::Client b = test::connect_client(server.socket(), "b");
  const uint64_t free1 = stats["kv_devices"][1]["free_bytes"].get<uint64_t>() / kChunk;
  ASSERT_GT(free1, 1u);
  EXPECT_EQ(granted(lease(b, 1, free1, free1)), free1);
  ipc::Client c = test::connect_client(server.socket(), "c");
  EXPECT_EQ(granted(lease(c, 1, 1, 1)), 0u);
  EXPECT_EQ(granted(lease(c, 0, 1, 1)), 1u);
  stats = server.stats();
  EXPECT_LE(stats["kv_devices"][1]["free_bytes"].get<uint64_t>(), kChunk);
  for (size_t d = 0; d < 2; ++d) {
    const json& dev = stats["kv_devices"][d];
    EXPECT_LE(dev["weights_bytes"].get<uint64_t>() + dev["kv_bytes"].get<uint64_t>(),
              dev["limit_bytes"].get<uint64_t>());
  }

  // A device the server does not have is named in a clear error; nothing moves.
  try {
    lease(a, 2, 1);
    ADD_FAILURE() << "a lease on device 2 of a server of 2 devices was accepted";
  } catch (const ipc::ProtocolError& e) {
    EXPECT_EQ(e.code(), ipc::ErrorCode::kBadRequest);
    EXPECT_NE(std::string(e.what()).find("device 2 is not a KV device of this server (it has 2"),
              std::string::npos)
        << e.what();
  }

  // a's connection closes: both devices take its chunks back, and the server says why.
  a.close();
  stats = wait_for_stats(server, [&](const json& s) { return kv_on(s, 1) == free1 * kChunk; });
  EXPECT_EQ(kv_on(stats, 1), free1 * kChunk);
  EXPECT_EQ(kv_on(stats, 0), kChunk);
  EXPECT_NE(server.log().find("5 chunks) returned: disconnected"), std::string::npos)
      << server.log();
}

// Without prefix sharing in this file: a worker's published blocks keep their chunks past its
// exit, and these tests check that leases come back (kv_share_process_test.cc shares).
std::vector<std::string> tp_worker_args(const ServerProcess& server) {
  return {test::binary("hearth-worker"),
          "--server",
          server.socket(),
          "--model",
          "tiny",
          "--backend",
          "cpu",
          "--set",
          "tensor_parallel=2",
          "--set",
          "kv_share=false"};
}

// Each request's final event, by id; every one must have finished by length.
size_t finished_by_length(const std::string& out) {
  size_t n = 0;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) {
    const json e = json::parse(line, nullptr, false);
    if (!e.is_object() || !e.contains("done")) continue;
    EXPECT_EQ(e.value("stop", ""), "length") << e.dump();
    n += e.value("stop", "") == "length";
  }
  return n;
}

// A serving TP=2 worker holds one context on each rank's device, the same on both (every rank
// holds the same blocks, its own heads of them); SIGKILLed, its connection closes and the server
// takes both devices' chunks back.
TEST(KvLeaseDevices, ATensorParallelWorkersLeaseIsOnEveryDeviceAndReturnsWhenItIsKilled) {
  ServerProcess server(tp_server_args(2, 200));
  test::TempDir dir;
  std::vector<std::string> argv = tp_worker_args(server);
  argv.insert(argv.end(), {"--serve", dir / "w.sock"});
  ChildProcess worker = ChildProcess::spawn(
      ChildProcess::Options(argv).stderr_to(ChildProcess::Stream::file(dir / "w.err")));
  json s = wait_for_stats(server, [&](const json& st) {
    const auto w = worker_entry(st, worker.pid());
    return w && test::kv_chunks_on(*w, 0) > 0 && test::kv_chunks_on(*w, 1) > 0;
  });
  const std::optional<json> w = worker_entry(s, worker.pid());
  ASSERT_TRUE(w) << s.dump() << test::read_file(dir / "w.err");
  // One context (512 positions) of one rank's heads: 5,120 bytes a position, one 10 MiB chunk.
  EXPECT_EQ(test::kv_chunks_on(*w, 0), 1u) << w->dump();
  EXPECT_EQ(test::kv_chunks_on(*w, 1), 1u) << w->dump();
  EXPECT_EQ((*w)["kv"]["bytes"], 20 * kMiB);
  EXPECT_EQ(kv_on(s, 0), 10 * kMiB);
  EXPECT_EQ(kv_on(s, 1), 10 * kMiB);

  // The worker's own stats count both ranks' chunks, and one block table's blocks.
  std::optional<ipc::Client> client = test::connect_when_listening(dir / "w.sock");
  ASSERT_TRUE(client) << test::read_file(dir / "w.err");
  const json lease = client->call(ipc::op::kStats).body["kv_lease"];
  EXPECT_EQ(lease["chunks"], 2) << lease.dump();
  EXPECT_EQ(lease["bytes"], 20 * kMiB);
  EXPECT_EQ(lease["blocks"], 128);  // 10 MiB of 81,920-byte blocks (16 positions, one rank)
  client.reset();

  ASSERT_EQ(::kill(worker.pid(), SIGKILL), 0);
  worker.wait();
  s = wait_for_stats(server, [&](const json& st) { return !worker_entry(st, worker.pid()); });
  EXPECT_FALSE(worker_entry(s, worker.pid())) << s.dump();
  EXPECT_EQ(kv_on(s, 0), 0);
  EXPECT_EQ(kv_on(s, 1), 0);
  EXPECT_EQ(s["kv_chunks"], 0);
  EXPECT_NE(server.log().find("(pid " + std::to_string(worker.pid()) +
                              ", 2 chunks) returned: disconnected"),
            std::string::npos)
      << server.log();
}

// Device 1 full (another client holds all of it as its minimum): a TP=2 worker gets no blocks,
// since rank 0's would be useless alone, gives back what device 0 gave it and waits, as a TP=1
// worker waits; once device 1 frees, every request runs.
TEST(KvLeaseDevices, ATensorParallelWorkerWaitsForItsFullDevice) {
  ServerProcess server(tp_server_args(2, 200));
  test::TempDir dir;
  ipc::Client hog = test::connect_client(server.socket(), "hog");
  const uint64_t free1 = server.stats()["kv_devices"][1]["free_bytes"].get<uint64_t>() / kChunk;
  ASSERT_EQ(granted(lease(hog, 1, free1, free1)), free1);
  const uint64_t leased_before = server.stats()["kv_chunks_total"].get<uint64_t>();

  std::vector<std::string> argv = tp_worker_args(server);
  argv.insert(argv.end(), {"--requests", test::write_growing_requests(dir, "requests.jsonl", 2),
                           "--format", "jsonl"});
  ChildProcess worker =
      ChildProcess::spawn(ChildProcess::Options(argv)
                              .stdout_to(ChildProcess::Stream::file(dir / "w.out"))
                              .stderr_to(ChildProcess::Stream::file(dir / "w.err")));
  // Device 0 leased it a chunk (rank 0's minimum) that it gave back: it holds nothing and waits.
  json s = wait_for_stats(server, [&](const json& st) {
    const auto w = worker_entry(st, worker.pid());
    return w && st["kv_chunks_total"].get<uint64_t>() > leased_before && (*w)["kv"]["chunks"] == 0;
  });
  const std::optional<json> w = worker_entry(s, worker.pid());
  ASSERT_TRUE(w) << s.dump() << test::read_file(dir / "w.err");
  EXPECT_GT(s["kv_chunks_total"].get<uint64_t>(), leased_before);
  EXPECT_EQ((*w)["kv"]["chunks"], 0) << w->dump();
  EXPECT_TRUE(worker.running()) << test::read_file(dir / "w.err");

  hog.close();
  const ExitStatus st = worker.wait();
  EXPECT_TRUE(st.exited_with(0)) << test::read_file(dir / "w.err");
  EXPECT_EQ(finished_by_length(test::read_file(dir / "w.out")), 2u);
  s = wait_for_stats(server, [](const json& st) { return st["kv_chunks"] == 0; });
  EXPECT_EQ(kv_on(s, 0), 0);
  EXPECT_EQ(kv_on(s, 1), 0);
}

// Two TP=2 workers and a client leasing as a TP=1 worker does (one context on device 0) share
// a budget too small for the workers' wishes: every request runs, neither device ever passes
// its limit, and the TP=1 client still gets its minimum while they grow.
TEST(KvLeaseDevices, TensorParallelWorkersDoNotStarveOthersOnTheirDevices) {
  // 50 MiB a device, ~8.5 MiB of weights: 4 chunks of 10 MiB on each, one kept for the TP=1
  // client; each worker's 16 requests at once (160 blocks of 128 a chunk) want two.
  ServerProcess server(tp_server_args(2, 100));
  test::TempDir dir;
  ipc::Client tp1 = test::connect_client(server.socket(), "tp1");
  // Its minimum stated (one chunk), then given back: the budget keeps it for it.
  const ipc::Frame first = tp1.call(ipc::op::kKvLease, ipc::make_kv_lease_args({10 * kMiB, 1, 1}));
  ASSERT_EQ(granted(first), 1u);
  tp1.call(ipc::op::kKvReturn,
           ipc::make_kv_return_args(first.body["chunks"].get<std::vector<uint64_t>>()));

  const std::string requests = test::write_growing_requests(dir, "requests.jsonl", 16);
  std::vector<std::string> argv = tp_worker_args(server);
  argv.insert(argv.end(), {"--requests", requests, "--format", "jsonl", "--set", "max_running=16"});
  std::vector<ChildProcess> workers = test::spawn_workers(argv, dir, 2);
  uint64_t peak = 0;
  bool tp1_ran = false;
  const auto deadline = test::patience_deadline() + std::chrono::minutes(4);
  while (test::any_running(workers) && std::chrono::steady_clock::now() < deadline) {
    const json s = server.stats();
    for (size_t d = 0; d < 2; ++d) {
      const json& dev = s["kv_devices"][d];
      EXPECT_LE(dev["weights_bytes"].get<uint64_t>() + dev["kv_bytes"].get<uint64_t>(),
                dev["limit_bytes"].get<uint64_t>())
          << dev.dump();
    }
    const uint64_t workers_kv = kv_on(s, 0);
    peak = std::max(peak, workers_kv);
    // Once the workers have grown past their minimums, the TP=1 client's is still there.
    if (!tp1_ran && workers_kv > 2 * 10 * kMiB) {
      const ipc::Frame again =
          tp1.call(ipc::op::kKvLease, ipc::make_kv_lease_args({10 * kMiB, 1, 1}));
      EXPECT_EQ(granted(again), 1u) << s.dump();
      tp1_ran = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i = 0; i < 2; ++i) {
    const std::string base = dir / ("w" + std::to_string(i));
    EXPECT_TRUE(workers[size_t(i)].wait().exited_with(0)) << test::read_file(base + ".err");
    EXPECT_EQ(finished_by_length(test::read_file(base + ".out")), 16u);
  }
  EXPECT_TRUE(tp1_ran) << "the workers never grew past their minimums (peak " << peak << ")";
}

// CPU ranks as processes on a served model (tensor_parallel_processes): the worker leads rank
// 0 and its hearth-tp-follower imports rank 1's pieces and leases rank 1's pool itself.
const std::vector<std::string> kProcesses = {"--set", "tensor_parallel_processes=true"};

std::vector<std::string> tp_served(const ServerProcess& server) {
  return {"--server", server.socket(),     "--model", "tiny",
          "--set",    "tensor_parallel=2", "--set",   "kv_share=false"};
}

// Several sampled requests in one engine, at once: each request's token lines, by id, exactly
// as written.
std::map<std::string, std::vector<std::string>> token_lines_by_id(const std::string& out) {
  std::map<std::string, std::vector<std::string>> lines;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) {
    const json e = json::parse(line, nullptr, false);
    if (e.is_object() && e.contains("token")) lines[e.value("id", "")].push_back(line);
  }
  return lines;
}

// The pools are leased, not sized by each rank (the layout is the same): the token lines are the
// served in-process ranks' byte for byte, alone (a sampled continuation) and batched.
TEST(KvLeaseDevices, CpuRankProcessesOnLeasedPoolsGiveTheInProcessRanksTokens) {
  ServerProcess server(tp_server_args(2, 200));
  const test::TempDir& dir = server.dir();
  const auto alone = [&](const std::vector<std::string>& extra) {
    const test::WorkerRun run = test::run_worker(
        dir,
        test::concat(test::concat(tp_served(server), test::generation_args(7, 48, true)), extra));
    EXPECT_TRUE(run.status.exited_with(0)) << run.err;
    return test::parse_stream(run.out).tokens;
  };
  const std::vector<std::string> want = alone({});
  ASSERT_EQ(want.size(), 48u);
  EXPECT_EQ(alone(kProcesses), want);

  const std::string requests = test::write_growing_requests(dir, "batch.jsonl", 6);
  const auto batched = [&](const std::vector<std::string>& extra) {
    const test::WorkerRun run = test::run_worker(
        dir, test::concat(test::concat(tp_served(server), {"--requests", requests, "--backend",
                                                           "cpu", "--format", "jsonl"}),
                          extra));
    EXPECT_TRUE(run.status.exited_with(0)) << run.err;
    return token_lines_by_id(run.out);
  };
  const auto want_batched = batched({});
  ASSERT_EQ(want_batched.size(), 6u);
  EXPECT_EQ(batched(kProcesses), want_batched);
  // Every rank's lease went back with its process.
  const json s = wait_for_stats(server, [](const json& st) { return st["kv_chunks"] == 0; });
  EXPECT_EQ(s["kv_chunks"], 0) << s.dump();
}

// A serving CPU process group holds one context on each rank's device: rank 0's under the
// worker's connection on device 0 only, rank 1's under its follower's on device 1 only. A
// SIGKILLed follower's connection closes and the server takes its chunks back; the worker finds
// the dead rank, names it and exits, and the server takes device 0's back too.
TEST(KvLeaseDevices, CpuRankProcessesLeaseEachRanksPoolOnItsDeviceAndAKilledFollowerReturnsIt) {
  ServerProcess server(tp_server_args(2, 200));
  const test::TempDir& dir = server.dir();
  const std::string socket = dir / "w.sock";
  std::optional<test::ServedTpPair> group = test::start_served_tp_pair(
      test::concat(test::concat(test::concat({test::binary("hearth-worker")}, tp_served(server)),
                                {"--backend", "cpu", "--serve", socket, "--quiet"}),
                   kProcesses),
      socket, dir / "w.err");
  ASSERT_TRUE(group) << test::read_file(dir / "w.err");
  ChildProcess& leader = group->leader;
  std::optional<ipc::Client>& client = group->client;
  const pid_t follower = group->follower;

  const test::RankPools pools = test::wait_for_rank_pools(server, leader.pid(), follower);
  json s = pools.stats;
  const std::optional<json>& l = pools.leader;
  const std::optional<json>& f = pools.follower;
  ASSERT_TRUE(l && f) << s.dump() << test::read_file(dir / "w.err");
  // One context (512 positions) of one rank's heads: one 10 MiB chunk on each device.
  EXPECT_EQ(test::kv_chunks_on(*l, 0), 1u) << l->dump();
  EXPECT_EQ(test::kv_chunks_on(*l, 1), 0u) << l->dump();
  EXPECT_EQ(test::kv_chunks_on(*f, 1), 1u) << f->dump();
  EXPECT_EQ(test::kv_chunks_on(*f, 0), 0u) << f->dump();
  EXPECT_EQ(kv_on(s, 0), 10 * kMiB);
  EXPECT_EQ(kv_on(s, 1), 10 * kMiB);
  // The worker's own stats count both ranks' chunks, and one block table's blocks.
  const json lease = client->call(ipc::op::kStats).body["kv_lease"];
  EXPECT_EQ(lease["chunks"], 2) << lease.dump();
  EXPECT_EQ(lease["bytes"], 20 * kMiB);
  EXPECT_EQ(lease["blocks"], 128);

  ASSERT_EQ(::kill(follower, SIGKILL), 0);
  s = wait_for_stats(server, [&](const json& st) { return !worker_entry(st, follower); });
  EXPECT_FALSE(worker_entry(s, follower)) << s.dump();
  EXPECT_EQ(kv_on(s, 1), 0) << s.dump();
  EXPECT_NE(
      server.log().find("(pid " + std::to_string(follower) + ", 1 chunks) returned: disconnected"),
      std::string::npos)
      << server.log();
  client.reset();
  const auto status =
      leader.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(60));
  ASSERT_TRUE(status) << "the worker did not stop";
  EXPECT_FALSE(status->success());
  const std::string err = test::read_file(dir / "w.err");
  EXPECT_NE(err.find("tensor-parallel rank 1 (pid " + std::to_string(follower) + ")"),
            std::string::npos)
      << err;
  s = wait_for_stats(server, [](const json& st) { return st["kv_chunks"] == 0; });
  EXPECT_EQ(kv_on(s, 0), 0) << s.dump();
  EXPECT_EQ(kv_on(s, 1), 0) << s.dump();
}

// Sixteen requests at once want more than one context: every rank's pool grows together (the
// follower's through the leader's kv_grow), the same on both devices, each device's on its own
// connection; when the worker exits, every device's chunks are back.
TEST(KvLeaseDevices, CpuRankProcessesGrowEveryRanksPoolTogetherAndReturnThemAtExit) {
  ServerProcess server(tp_server_args(2, 200));
  const test::TempDir& dir = server.dir();
  const std::string requests = test::write_growing_requests(dir, "requests.jsonl", 16);
  ChildProcess worker = ChildProcess::spawn(
      ChildProcess::Options(
          test::concat(
              test::concat(test::concat({test::binary("hearth-worker")}, tp_served(server)),
                           {"--backend", "cpu", "--requests", requests, "--format", "jsonl",
                            "--set", "max_running=16"}),
              kProcesses))
          .stdout_to(ChildProcess::Stream::file(dir / "w.out"))
          .stderr_to(ChildProcess::Stream::file(dir / "w.err")));
  uint64_t peak_leader = 0, peak_follower = 0;
  const auto deadline = test::patience_deadline() + std::chrono::minutes(4);
  while (worker.running() && std::chrono::steady_clock::now() < deadline) {
    const json s = server.stats();
    const auto l = worker_entry(s, worker.pid());
    std::optional<json> f;
    for (const pid_t child : test::children_of(worker.pid()))
      if (!f) f = worker_entry(s, child);
    if (l && f) {
      EXPECT_EQ(test::kv_chunks_on(*l, 1), 0u) << l->dump();
      EXPECT_EQ(test::kv_chunks_on(*f, 0), 0u) << f->dump();
      peak_leader = std::max(peak_leader, test::kv_chunks_on(*l, 0));
      peak_follower = std::max(peak_follower, test::kv_chunks_on(*f, 1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(worker.wait().exited_with(0)) << test::read_file(dir / "w.err");
  EXPECT_EQ(finished_by_length(test::read_file(dir / "w.out")), 16u);
  EXPECT_GE(peak_leader, 2u) << "rank 0's pool never grew past one context";
  EXPECT_GE(peak_follower, 2u) << "rank 1's pool never grew past one context";
  const json s = wait_for_stats(server, [](const json& st) { return st["kv_chunks"] == 0; });
  EXPECT_EQ(kv_on(s, 0), 0) << s.dump();
  EXPECT_EQ(kv_on(s, 1), 0) << s.dump();
}

}  // namespace
}  // namespace hearth
