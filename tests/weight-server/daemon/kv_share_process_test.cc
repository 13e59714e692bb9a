// Prefix KV shared across served workers (issue 22 items 3 and 4), as real processes:
// hearth-server (memfd) and hearth-worker --server runs on the CPU engine. A prompt one worker
// computed is read by the next from the server's shared blocks: its cached_tokens count them,
// and its tokens and logprobs are those it computes itself with kv_share off. Never across a
// cache_salt or a cache domain (other numerics). A SIGKILLed owner's published blocks stay
// readable, nothing it never published is found, and once its memory is needed it comes back.
#include <gtest/gtest.h>

#include <signal.h>

#include <fstream>
#include <optional>

#include "kv_lease_test_support.h"

namespace hearth {
namespace {

using json = nlohmann::json;
using test::ServerProcess;
using test::TempDir;

constexpr int kBlock = 16;  // the default kv_block_size

// Long enough for several full blocks on the tiny model's tokenizer, short of its context (512).
const std::string kPrompt =
    "The lighthouse keeper wrote in his log every evening: the wind, the ships, the birds that "
    "rested on the rail, the colour of the sea at dusk, and the names of the stars he could see "
    "before the lamp was lit. Tonight he wrote:";

json request(const std::string& id, json settings = json::object()) {
  settings["id"] = id;
  settings["prompt"] = kPrompt;
  settings["temperature"] = 0.8;
  settings["seed"] = 3;
  settings["logprobs"] = 3;
  if (!settings.contains("max_tokens")) settings["max_tokens"] = 24;
  return settings;
}

std::string write_request(const TempDir& dir, const std::string& name, const json& r) {
  const std::string path = dir / name;
  std::ofstream(path) << r.dump() << "\n";
  return path;
}

// One served worker run over a requests file, to completion; `extra` adds flags.
test::Stream run_served(const ServerProcess& server, const TempDir& dir,
                        const std::string& requests, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--server",   server.socket(), "--model",  "tiny",
                                   "--backend",  "cpu",           "--format", "jsonl",
                                   "--requests", requests};
  args.insert(args.end(), extra.begin(), extra.end());
  const test::WorkerRun run = test::run_worker(dir, args);
  EXPECT_TRUE(run.status.exited_with(0)) << run.err;
  test::Stream s = test::parse_stream(run.out);
  EXPECT_EQ(s.done.value("stop", ""), "length") << run.out.substr(0, 2000) << run.err;
  return s;
}

// Full blocks a worker may take for a prompt: never the one holding its last token.
int shareable_tokens(const test::Stream& s) {
  return (s.done.at("prompt_tokens").get<int>() - 1) / kBlock * kBlock;
}

using test::wait_for_stats;

bool has_worker(const json& stats, pid_t pid) {
  for (const json& w : stats["workers"])
    if (w["pid"] == pid) return true;
  return false;
}

// hearth-worker --server ... --serve for the length of a test.
class ServingWorker {
 public:
  ServingWorker(const ServerProcess& server, const TempDir& dir, const std::string& name)
      : socket_(dir / (name + ".sock")),
        err_(dir / (name + ".err")),
        process_(ChildProcess::spawn(
            ChildProcess::Options({test::binary("hearth-worker"), "--server", server.socket(),
                                   "--model", "tiny", "--backend", "cpu", "--serve", socket_})
                .stderr_to(ChildProcess::Stream::file(err_)))) {
    for (auto deadline = test::patience_deadline();
         !client_ && process_.running() && std::chrono::steady_clock::now() < deadline;) {
      try {
        client_.emplace(test::connect_client(socket_));
      } catch (const ipc::IpcError&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (!client_) throw std::runtime_error("the worker did not listen: " + test::read_file(err_));
  }
  ~ServingWorker() {
    client_.reset();
    if (process_.running()) ::kill(process_.pid(), SIGKILL);
    process_.wait();
  }

  // Submits `r` and polls its events until its final one, which it returns.
  json run(const json& r) {
    client_->call("submit", {{"request", r}});
    for (auto deadline = test::patience_deadline(); std::chrono::steady_clock::now() < deadline;) {
      const json body = client_->call("events").body;  // held: the loop reads into it
      for (const json& e : body.at("events"))
        if (e.contains("done")) return e;
    }
    ADD_FAILURE() << "no final event: " << test::read_file(err_) << "\nstats: " << stats().dump();
    return {};
  }
  void submit(const json& r) { client_->call("submit", {{"request", r}}); }
  json stats() { return client_->call(ipc::op::kStats).body; }
  ChildProcess& process() { return process_; }

 private:
  std::string socket_, err_;
  ChildProcess process_;
  std::optional<ipc::Client> client_;
};

// Worker A computes the prompt and exits (its chunk stays with the server for its published
// blocks); worker B then finds every full block of it, and its tokens and logprobs equal those
// of a worker with kv_share off, which finds nothing.
TEST(KvShareProcess, AWorkerReadsThePrefixAnotherComputedWithTheSameTokens) {
  ServerProcess server;
  TempDir dir;
  const std::string requests = write_request(dir, "p.jsonl", request("p"));
  const test::Stream a = run_served(server, dir, requests);
  EXPECT_EQ(a.done["cached_tokens"], 0);
  const int shareable = shareable_tokens(a);
  ASSERT_GE(shareable, 4 * kBlock) << a.done.dump();
  EXPECT_GE(server.stats()["kv_share"]["blocks"].get<int>(), shareable / kBlock);

  const test::Stream b = run_served(server, dir, requests);
  EXPECT_EQ(b.done["cached_tokens"], shareable) << b.done.dump();
  const test::Stream alone = run_served(server, dir, requests, {"--set", "kv_share=false"});
  EXPECT_EQ(alone.done["cached_tokens"], 0) << alone.done.dump();
  ASSERT_FALSE(b.tokens.empty());
  EXPECT_EQ(b.tokens, alone.tokens);  // ids, text, logprob and top logprobs, byte for byte
  EXPECT_EQ(a.tokens, alone.tokens);
}

// Workers of tensor_parallel 2 on a sharded server (--tensor-parallel 2): each rank's pool
// publishes its own pieces of every full block (the server holds both ranks' of each), and a
// second TP=2 worker finds the whole shareable prompt on both ranks with the tokens and
// logprobs of one that does not share; so does a worker whose ranks are processes (rank 1's
// finds go over its channel to the follower, whose pool maps the blocks).
TEST(KvShareProcess, TensorParallelWorkersShareThePrefixRankByRank) {
  ServerProcess server(test::kv_budget_args(200, 2));
  TempDir dir;
  const std::string requests = write_request(dir, "p.jsonl", request("p"));
  const std::vector<std::string> tp = {"--set", "tensor_parallel=2"};
  const test::Stream a = run_served(server, dir, requests, tp);
  EXPECT_EQ(a.done["cached_tokens"], 0);
  const int shareable = shareable_tokens(a);
  ASSERT_GE(shareable, 4 * kBlock) << a.done.dump();
  EXPECT_GE(server.stats()["kv_share"]["blocks"].get<int>(), 2 * shareable / kBlock);

  const test::Stream b = run_served(server, dir, requests, tp);
  EXPECT_EQ(b.done["cached_tokens"], shareable) << b.done.dump();
  const test::Stream alone =
      run_served(server, dir, requests, {"--set", "tensor_parallel=2", "--set", "kv_share=false"});
  EXPECT_EQ(alone.done["cached_tokens"], 0) << alone.done.dump();
  ASSERT_FALSE(b.tokens.empty());
  EXPECT_EQ(b.tokens, alone.tokens);
  EXPECT_EQ(a.tokens, alone.tokens);
  const test::Stream processes =
      run_served(server, dir, requests,
                 {"--set", "tensor_parallel=2", "--set", "tensor_parallel_processes=true"});
  EXPECT_EQ(processes.done["cached_tokens"], shareable) << processes.done.dump();
  EXPECT_EQ(processes.tokens, alone.tokens);
}

// The other way round: a worker whose ranks are processes publishes both ranks' pieces (rank
// 1's from its follower's pool), and an in-process TP=2 worker finds them all.
TEST(KvShareProcess, ARankProcessGroupsPrefixIsFoundByAnInProcessWorker) {
  ServerProcess server(test::kv_budget_args(200, 2));
  TempDir dir;
  const std::string requests = write_request(dir, "p.jsonl", request("p"));
  const test::Stream a =
      run_served(server, dir, requests,
                 {"--set", "tensor_parallel=2", "--set", "tensor_parallel_processes=true"});
  const int shareable = shareable_tokens(a);
  ASSERT_GE(shareable, 4 * kBlock) << a.done.dump();
  EXPECT_GE(server.stats()["kv_share"]["blocks"].get<int>(), 2 * shareable / kBlock);
  const test::Stream b = run_served(server, dir, requests, {"--set", "tensor_parallel=2"});
  EXPECT_EQ(b.done["cached_tokens"], shareable) << b.done.dump();
  EXPECT_EQ(b.tokens, a.tokens);
}

// A TP=2 worker that exits leaves an orphaned chunk of published pieces on each rank's device;
// memory asked on device 1 evicts device 1's orphan, never device 0's.
TEST(KvShareProcess, ATensorParallelOwnersBlocksAreEvictedOnlyOnTheDeviceThatNeedsTheMemory) {
  ServerProcess server(test::kv_budget_args(100, 2));  // 50 MiB a device, its weights included
  TempDir dir;
  run_served(server, dir, write_request(dir, "p.jsonl", request("p")),
             {"--set", "tensor_parallel=2"});
  const json before = server.stats();
  ASSERT_EQ(before["kv_share"]["orphaned_chunks"], 2) << before.dump();
  const auto kv_on = [](const json& stats, int device) {
    return stats.at("kv_devices").at(device).at("kv_bytes").get<uint64_t>();
  };
  ASSERT_GT(kv_on(before, 1), 0u);

  ipc::Client c = test::connect_client(server.socket(), "c");
  constexpr uint64_t kChunk = uint64_t(2) << 20;
  const ipc::Frame got =
      c.call(ipc::op::kKvLease, ipc::make_kv_lease_args(ipc::KvLeaseRequest{kChunk, 25, 0, 1}));
  EXPECT_GT(got.body.at("chunks").size(), 0u);
  const json after = server.stats();
  EXPECT_EQ(after["kv_share"]["orphaned_chunks"], 1) << after.dump();
  EXPECT_EQ(after["kv_share"]["evicted_chunks_total"], 1);
  EXPECT_EQ(kv_on(after, 0), kv_on(before, 0));  // device 0's orphan stays
}

// Another cache_salt, or other numerics (another cache domain), finds nothing.
TEST(KvShareProcess, NothingIsSharedAcrossSaltsOrCacheDomains) {
  ServerProcess server;
  TempDir dir;
  const test::Stream a = run_served(server, dir, write_request(dir, "p.jsonl", request("p")));
  ASSERT_GE(shareable_tokens(a), 4 * kBlock);

  const test::Stream salted = run_served(
      server, dir, write_request(dir, "s.jsonl", request("p", {{"cache_salt", "tenant-2"}})));
  EXPECT_EQ(salted.done["cached_tokens"], 0) << salted.done.dump();
  EXPECT_EQ(salted.tokens, a.tokens);  // a salt changes what is shared, never the tokens

  const test::Stream other_domain = run_served(
      server, dir, write_request(dir, "d.jsonl", request("d")), {"--set", "batch_invariant=false"});
  EXPECT_EQ(other_domain.done["cached_tokens"], 0) << other_domain.done.dump();

  // The salted request's own blocks are found under its salt.
  const test::Stream salted_again = run_served(
      server, dir, write_request(dir, "s2.jsonl", request("p", {{"cache_salt", "tenant-2"}})));
  EXPECT_EQ(salted_again.done["cached_tokens"], shareable_tokens(a));
}

// The worker's stats count what it published and what it found (item 4).
TEST(KvShareProcess, AServingWorkersStatsCountSharedBlocks) {
  ServerProcess server;
  TempDir dir;
  ServingWorker a(server, dir, "a");
  const json a_done = a.run(request("p"));
  const int shareable = (a_done.at("prompt_tokens").get<int>() - 1) / kBlock * kBlock;
  const json a_stats = a.stats();
  EXPECT_EQ(a_stats["kv_share"], true) << a_stats.dump();
  EXPECT_EQ(a_stats["kv_share_hit_tokens"], 0);
  EXPECT_GE(a_stats["kv_share_published_blocks"].get<int>(), shareable / kBlock);

  ServingWorker b(server, dir, "b");
  const json b_done = b.run(request("p"));
  EXPECT_EQ(b_done["cached_tokens"], shareable) << b_done.dump();
  const json b_stats = b.stats();
  EXPECT_EQ(b_stats["kv_share_hit_tokens"], shareable) << b_stats.dump();
  EXPECT_EQ(b_stats["kv_share_hit_blocks"], shareable / kBlock);
  // B published only what it computed past the shared prefix.
  EXPECT_LT(b_stats["kv_share_published_blocks"].get<int>(),
            a_stats["kv_share_published_blocks"].get<int>());
}

// A worker SIGKILLed while it generates: the blocks it published (after their steps
// succeeded) stay readable and give another worker its own tokens; nothing else of it is
// found. Once the memory is needed, the server evicts the dead worker's chunks and the budget
// returns to nothing held.
TEST(KvShareProcess, AKilledOwnersBlocksStayReadableAndItsMemoryComesBack) {
  // Three 10 MiB chunks beside the weights.
  ServerProcess server({"--backend", "memfd", "--model", test::tiny_model_dir().string() + ":tiny",
                        "--memory-mb", "100", "--gpu-memory-fraction", "0.5"});
  TempDir dir;
  const std::string requests = write_request(dir, "p.jsonl", request("p"));
  const test::Stream alone = run_served(server, dir, requests, {"--set", "kv_share=false"});
  const int shareable = shareable_tokens(alone);
  {
    ServingWorker a(server, dir, "a");
    a.submit(request("long", {{"max_tokens", 400}, {"ignore_eos", true}, {"seed", 9}}));
    // Its prompt's blocks are published once its prefill step succeeded; kill it mid-decode.
    json s = wait_for_stats(server, [&](const json& st) {
      return st["kv_share"]["blocks"].get<int>() >= shareable / kBlock;
    });
    ASSERT_GE(s["kv_share"]["blocks"].get<int>(), shareable / kBlock) << s.dump();
    ASSERT_EQ(::kill(a.process().pid(), SIGKILL), 0);
    a.process().wait();
    s = wait_for_stats(server, [&](const json& st) { return !has_worker(st, a.process().pid()); });
    EXPECT_EQ(s["kv_share"]["orphaned_chunks"], 1) << s.dump();
  }
  // B shares the killed worker's prompt blocks, no more (its last, partly filled block and
  // the decode steps that never finished are not published), with its own tokens.
  const test::Stream b = run_served(server, dir, requests);
  EXPECT_EQ(b.done["cached_tokens"], shareable) << b.done.dump();
  EXPECT_EQ(b.tokens, alone.tokens);

  // A worker that needs the whole budget: the orphaned chunks nobody reads are evicted for it.
  std::string many;
  for (int i = 0; i < 8; ++i)
    many += json{{"id", "m" + std::to_string(i)},
                 {"prompt", "Number " + std::to_string(i) + ":"},
                 {"max_tokens", 300},
                 {"ignore_eos", true}}
                .dump() +
            "\n";
  const std::string many_path = dir / "many.jsonl";
  std::ofstream(many_path) << many;
  const test::WorkerRun big = test::run_worker(
      dir, {"--server", server.socket(), "--model", "tiny", "--backend", "cpu", "--format", "jsonl",
            "--requests", many_path, "--set", "kv_share=false"});
  EXPECT_TRUE(big.status.exited_with(0)) << big.err;
  const json after = wait_for_stats(server, [](const json& st) {
    return st["memory"]["kv_bytes"] == 0 && st["kv_share"]["orphaned_chunks"] == 0;
  });
  EXPECT_EQ(after["memory"]["kv_bytes"], 0) << after.dump();
  EXPECT_EQ(after["kv_share"]["orphaned_chunks"], 0);
  EXPECT_EQ(after["kv_share"]["blocks"], 0);
  EXPECT_GE(after["kv_share"]["evicted_chunks_total"].get<int>(), 1);
}

}  // namespace
}  // namespace hearth
