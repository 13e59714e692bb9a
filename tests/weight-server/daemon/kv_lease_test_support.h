#pragma once

// What the KV lease process tests share (issue 22, and per device issue 26): waiting on the
// server's stats for a cause to show, a worker's entry in them, a serving worker's socket once it
// listens, and requests that make a worker grow its lease.

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server_test_support.h"
#include "tests/support/child_pids.h"

namespace hearth::test {

// hearth-server's arguments for the tiny model as "tiny" on memfd, each device's budget half of
// `memory_mb`, its ranks over `ranks` devices (--tensor-parallel) when more than one.
inline std::vector<std::string> kv_budget_args(uint64_t memory_mb, int ranks = 1) {
  std::vector<std::string> args = {"--backend",
                                   "memfd",
                                   "--model",
                                   tiny_model_dir().string() + ":tiny",
                                   "--memory-mb",
                                   std::to_string(memory_mb),
                                   "--gpu-memory-fraction",
                                   "0.5"};
  if (ranks > 1) args.insert(args.end(), {"--tensor-parallel", std::to_string(ranks)});
  return args;
}

// `n` processes of `argv` at once, the i-th's output in `dir`/w<i>.out and .err.
inline std::vector<ChildProcess> spawn_workers(const std::vector<std::string>& argv,
                                               const TempDir& dir, int n) {
  std::vector<ChildProcess> workers;
  for (int i = 0; i < n; ++i) {
    const std::string base = dir / ("w" + std::to_string(i));
    workers.push_back(
        ChildProcess::spawn(ChildProcess::Options(argv)
                                .stdout_to(ChildProcess::Stream::file(base + ".out"))
                                .stderr_to(ChildProcess::Stream::file(base + ".err"))));
  }
  return workers;
}

inline bool any_running(std::vector<ChildProcess>& processes) {
  for (ChildProcess& p : processes)
    if (p.running()) return true;
  return false;
}

// Polls the server until `pred(stats)` holds; the deadline only stops a hang.
template <typename Pred>
nlohmann::json wait_for_stats(ServerProcess& server, Pred pred) {
  const auto deadline = patience_deadline();
  nlohmann::json s = server.stats();
  while (!pred(s) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s = server.stats();
  }
  return s;
}

// The stats' entry of the worker whose pid is `pid`, if it holds a lease.
inline std::optional<nlohmann::json> worker_entry(const nlohmann::json& stats, pid_t pid) {
  for (const nlohmann::json& w : stats["workers"])
    if (w["pid"] == pid) return w;
  return std::nullopt;
}

// The KV chunks a worker's stats entry holds on `device` (issue 26).
inline uint64_t kv_chunks_on(const nlohmann::json& worker, size_t device) {
  for (const nlohmann::json& d : worker["kv"]["devices"])
    if (d["device"] == device) return d["chunks"].get<uint64_t>();
  return 0;
}

// A client of the serving worker at `socket`, once it listens (nullopt if it never does).
inline std::optional<ipc::Client> connect_when_listening(const std::string& socket) {
  for (auto deadline = patience_deadline(); std::chrono::steady_clock::now() < deadline;) {
    try {
      return connect_client(socket);
    } catch (const ipc::IpcError&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return std::nullopt;
}

// A serving two-rank process group: its leader (hearth-worker `argv`, which serves on `socket`,
// stderr to `err`), a client of it and its one follower; nullopt if it never listens or has
// another number of followers (`err` says why).
struct ServedTpPair {
  ChildProcess leader;
  std::optional<ipc::Client> client;  // reset() hangs up
  pid_t follower;
};
inline std::optional<ServedTpPair> start_served_tp_pair(const std::vector<std::string>& argv,
                                                        const std::string& socket,
                                                        const std::string& err) {
  ChildProcess leader =
      ChildProcess::spawn(ChildProcess::Options(argv).stderr_to(ChildProcess::Stream::file(err)));
  std::optional<ipc::Client> client = connect_when_listening(socket);
  const std::vector<pid_t> followers = children_of(leader.pid());
  if (!client || followers.size() != 1) return std::nullopt;
  return ServedTpPair{std::move(leader), std::move(client), followers[0]};
}

// The server's stats once `leader` holds KV chunks on device 0 and `follower` on device 1 (or
// the deadline passed), with their two entries.
struct RankPools {
  nlohmann::json stats;
  std::optional<nlohmann::json> leader, follower;
};
inline RankPools wait_for_rank_pools(ServerProcess& server, pid_t leader, pid_t follower) {
  RankPools p;
  p.stats = wait_for_stats(server, [&](const nlohmann::json& st) {
    const auto l = worker_entry(st, leader);
    const auto f = worker_entry(st, follower);
    return l && f && kv_chunks_on(*l, 0) > 0 && kv_chunks_on(*f, 1) > 0;
  });
  p.leader = worker_entry(p.stats, leader);
  p.follower = worker_entry(p.stats, follower);
  return p;
}

// `count` sampled requests of 150 tokens each (ignore_eos), one per line, in `dir`/`name`.
inline std::string write_growing_requests(const TempDir& dir, const std::string& name, int count) {
  const std::string path = dir / name;
  std::ofstream out(path);
  for (int i = 0; i < count; ++i)
    out << nlohmann::json{{"id", "r" + std::to_string(i)},
                          {"prompt", "A fortune for today, number " + std::to_string(i) + ":"},
                          {"temperature", 0.8},
                          {"seed", i},
                          {"max_tokens", 150},
                          {"ignore_eos", true}}
               .dump()
        << "\n";
  return path;
}

}  // namespace hearth::test
