// hearth-worker --serve as a real process on the default model: clients submit over the hearth
// protocol and collect their events; each request's tokens equal what --requests (and so the
// request alone) gives; ids are per client; refusals name the field; cancel, disconnect, idle
// exit and SIGTERM (in-flight requests end with an error event) behave as documented.
#include <gtest/gtest.h>

#include <signal.h>

#include <thread>

#include "ipc/client.h"
#include "proof/worker_output.h"
#include "tests/proof/proof_test_util.h"
#include "worker/engine/event_json.h"

namespace hearth::proof::testing {
namespace {

using namespace std::chrono_literals;

// A serving worker for the length of a test.
class ServingWorker {
 public:
  ServingWorker(const TempDir& dir, std::vector<std::string> extra = {})
      : socket_((dir / "sock" / "worker.sock").string()) {
    std::vector<std::string> argv = {(bin_dir() / "hearth-worker").string(),
                                     "--model",
                                     default_model().string(),
                                     "--backend",
                                     "cpu",
                                     "--serve",
                                     socket_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process_.emplace(
        ChildProcess::spawn(ChildProcess::Options(argv)
                                .stdout_to(ChildProcess::Stream::file(dir / "worker.out"))
                                .stderr_to(ChildProcess::Stream::file(dir / "worker.err"))));
    for (int i = 0; i < 3000; ++i) {
      if (process_->wait_until(std::chrono::steady_clock::now()))
        throw std::runtime_error("hearth-worker exited: " + read_file(dir / "worker.err"));
      try {
        ipc::Client::connect(socket_);
        return;
      } catch (const ipc::IpcError&) {
        std::this_thread::sleep_for(10ms);
      }
    }
    throw std::runtime_error("hearth-worker --serve did not start listening within 30 s");
  }

  ipc::Client connect() const {
    ipc::ClientOptions options;
    options.name = "test";
    options.timeout = 120s;
    return ipc::Client::connect(socket_, options);
  }
  ChildProcess& process() { return *process_; }

 private:
  std::string socket_;
  std::optional<ChildProcess> process_;  // killed and reaped with the test
};

json request(const std::string& id, const std::string& prompt, json settings) {
  settings["id"] = id;
  settings["prompt"] = prompt;
  return settings;
}

// Polls events until every one of `ids` has its final event.
std::map<std::string, std::vector<Event>> collect(ipc::Client& client, size_t requests) {
  std::map<std::string, std::vector<Event>> out;
  size_t done = 0;
  while (done < requests) {
    const json reply = client.call("events").body;
    const json& events = reply.at("events");
    if (events.empty()) break;  // nothing in flight any more
    for (const json& e : events) {
      Event event = event_from_json(e);
      done += event.done;
      out[event.id].push_back(std::move(event));
    }
  }
  return out;
}

struct Tokens {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;
  std::string stop;
  bool operator==(const Tokens&) const = default;
};

Tokens tokens_of(const std::vector<Event>& events) {
  Tokens t;
  for (const Event& e : events) {
    if (e.done) {
      t.stop = e.summary.stop;
    } else {
      t.ids.push_back(e.token.token);
      t.logprobs.push_back(e.token.logprob);
    }
  }
  return t;
}

Tokens tokens_of(const Generation& g) {
  return {g.tokens, g.logprobs, g.stop};
}

const json kSettings[2][3] = {
    {{{"temperature", 0}, {"max_tokens", 10}},
     {{"temperature", 0.9}, {"seed", 5}, {"max_tokens", 14}},
     {{"temperature", 0.7}, {"top_k", 30}, {"repetition_penalty", 1.2}, {"max_tokens", 9}}},
    {{{"temperature", 1.0}, {"seed", 8}, {"max_tokens", 12}, {"ignore_eos", true}},
     {{"temperature", 0}, {"max_tokens", 6}, {"stop", {" the"}}},
     {{"temperature", 0.8}, {"top_p", 0.9}, {"seed", 1}, {"max_tokens", 16}}},
};
const char* kPrompts[] = {"A computer", "Never trust a computer", "Once upon a time"};

TEST(WorkerServe, TwoClientsWithTheSameIdsGetWhatTheRequestsFileGives) {
  TempDir dir;
  ServingWorker worker(dir, {"--quiet"});
  std::map<std::string, Tokens> served[2];
  auto client_run = [&](int c) {
    ipc::Client client = worker.connect();
    for (int r = 0; r < 3; ++r) {
      const json reply =
          client
              .call("submit",
                    {{"request", request("r" + std::to_string(r), kPrompts[r], kSettings[c][r])}})
              .body;
      EXPECT_EQ(reply["request_id"], "r" + std::to_string(r));
    }
    for (const auto& [id, events] : collect(client, 3)) served[c][id] = tokens_of(events);
  };
  std::thread a(client_run, 0), b(client_run, 1);
  a.join();
  b.join();

  // The same six requests from a file, ids made unique.
  std::string file;
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < 3; ++r)
      file +=
          request("c" + std::to_string(c) + "r" + std::to_string(r), kPrompts[r], kSettings[c][r])
              .dump() +
          "\n";
  write_file(dir / "requests.jsonl", file);
  const CommandResult batch =
      run_command({(bin_dir() / "hearth-worker").string(), "--model", default_model().string(),
                   "--backend", "cpu", "--requests", (dir / "requests.jsonl").string()},
                  dir.path());
  ASSERT_EQ(batch.exit_code(), 0) << batch.err;
  std::map<std::string, Tokens> expected;
  for (const auto& [id, g] : parse_batched_worker_output(batch.out)) expected[id] = tokens_of(g);
  for (int c = 0; c < 2; ++c) {
    ASSERT_EQ(served[c].size(), 3u) << "client " << c;
    for (int r = 0; r < 3; ++r) {
      const std::string id = "r" + std::to_string(r);
      EXPECT_EQ(served[c][id], expected["c" + std::to_string(c) + id]) << "client " << c << id;
      EXPECT_FALSE(served[c][id].ids.empty());
    }
  }
}

TEST(WorkerServe, RefusedRequestsNameTheField) {
  TempDir dir;
  ServingWorker worker(dir, {"--quiet"});
  ipc::Client client = worker.connect();
  const std::pair<json, std::string> bad[] = {
      {{{"request", request("a", "hi", {{"temprature", 1}})}},
       "submit (request 'a'): unknown request setting 'temprature'"},
      {{{"request", request("b", "hi", {{"max_tokens", 600}})}},
       "request 'b': max_tokens: 3 prompt tokens + 600 max_tokens exceed the context length 512"},
      {{{"request", {{"prompt", "no id"}}}}, "\"id\" must be a non-empty string"},
      {json::object(), "submit needs a \"request\""},
  };
  for (const auto& [args, message] : bad) {
    try {
      client.call("submit", args);
      ADD_FAILURE() << "accepted " << args.dump();
    } catch (const ipc::ProtocolError& e) {
      EXPECT_EQ(e.code(), ipc::ErrorCode::kBadRequest);
      EXPECT_NE(e.message().find(message), std::string::npos) << e.message();
    }
  }
  // The connection is still good, and nothing is in flight: events answers at once.
  EXPECT_TRUE(client.call("events").body["events"].empty());
}

TEST(WorkerServe, CancelAndDisconnectEndRequestsAndFreeTheirBlocks) {
  TempDir dir;
  ServingWorker worker(dir, {"--quiet"});
  ipc::Client client = worker.connect();
  const json long_request = {{"max_tokens", 400}, {"ignore_eos", true}};
  client.call("submit", {{"request", request("long", "A computer", long_request)}});
  const json first = client.call("events").body["events"];
  ASSERT_FALSE(first.empty());
  EXPECT_TRUE(client.call("cancel", {{"request_id", "long"}}).body["cancelled"]);
  EXPECT_FALSE(client.call("cancel", {{"request_id", "nobody"}}).body["cancelled"]);
  const auto events = collect(client, 1);
  ASSERT_TRUE(events.contains("long"));
  EXPECT_EQ(tokens_of(events.at("long")).stop, "cancelled");

  // A client that goes away mid-request: its requests are cancelled.
  {
    ipc::Client leaving = worker.connect();
    leaving.call("submit", {{"request", request("orphan", "Once", long_request)}});
  }
  json stats;
  for (int i = 0; i < 3000; ++i) {
    stats = client.call("stats").body;
    if (stats["running"] == 0 && stats["waiting"] == 0) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(stats["running"], 0) << stats.dump();
  EXPECT_EQ(stats["kv_blocks_used"], 0) << stats.dump();
  EXPECT_LT(stats["generated_tokens"].get<int>(), 400) << "the orphan ran to the end";
}

// A prompt sent again finds its blocks: the final event says how many prompt tokens came from
// the cache, the stats op counts queries and hits (what the gateway's metrics read), and the
// tokens are those of the first time.
TEST(WorkerServe, ARepeatedPromptIsServedFromThePrefixCache) {
  TempDir dir;
  ServingWorker worker(dir, {"--quiet"});
  ipc::Client client = worker.connect();
  const std::string prompt =
      "Once upon a time, in a village at the edge of the forest, there lived an old programmer "
      "who had never seen the sea, and every morning he wrote";
  const json greedy = {{"temperature", 0}, {"max_tokens", 8}};
  std::map<std::string, std::vector<Event>> events;
  for (const char* id : {"first", "again"}) {
    client.call("submit", {{"request", request(id, prompt, greedy)}});
    for (auto& [k, v] : collect(client, 1)) events[k] = std::move(v);
  }
  ASSERT_TRUE(events.contains("first") && events.contains("again"));
  const DoneEvent& first = events.at("first").back().summary;
  const DoneEvent& again = events.at("again").back().summary;
  EXPECT_EQ(first.cached_tokens, 0);
  EXPECT_GE(again.cached_tokens, 16);  // at least one whole block of the default 16
  EXPECT_LT(again.cached_tokens, again.prompt_tokens);  // never the last token
  EXPECT_EQ(tokens_of(events.at("again")), tokens_of(events.at("first")));
  const json stats = client.call("stats").body;
  EXPECT_EQ(stats["prefix_cache_hits"], again.cached_tokens) << stats.dump();
  EXPECT_EQ(stats["prefix_cache_queries"], first.prompt_tokens + again.prompt_tokens)
      << stats.dump();
  EXPECT_GT(stats["prefix_cache_blocks"].get<int>(), 0) << stats.dump();
  EXPECT_EQ(stats["prefix_cache_evicted_blocks"], 0) << stats.dump();
  EXPECT_EQ(stats["kv_blocks_used"], 0) << stats.dump();
}

TEST(WorkerServe, SigtermEndsInFlightRequestsWithAnErrorEvent) {
  TempDir dir;
  ServingWorker worker(dir, {"--quiet"});
  ipc::Client client = worker.connect();
  client.call(
      "submit",
      {{"request", request("long", "A computer", {{"max_tokens", 400}, {"ignore_eos", true}})}});
  ASSERT_FALSE(client.call("events").body["events"].empty());
  ASSERT_EQ(::kill(worker.process().pid(), SIGTERM), 0);
  const auto events = collect(client, 1);
  ASSERT_TRUE(events.contains("long"));
  const Event& last = events.at("long").back();
  ASSERT_TRUE(last.done);
  EXPECT_EQ(last.summary.stop, "error");
  EXPECT_EQ(last.summary.error, "the worker is shutting down (SIGTERM)");
  EXPECT_LT(last.summary.generated_tokens, 400);
  const auto status = worker.process().wait_until(std::chrono::steady_clock::now() + 60s);
  ASSERT_TRUE(status) << "the worker did not exit";
  EXPECT_EQ(status->code, 0);
}

TEST(WorkerServe, AnIdleWorkerExitsByItself) {
  TempDir dir;
  ServingWorker worker(dir, {"--idle-exit", "0.5"});
  {
    ipc::Client client = worker.connect();
    client.call("submit", {{"request", request("one", "A computer", {{"max_tokens", 3}})}});
    EXPECT_EQ(tokens_of(collect(client, 1).at("one")).ids.size(), 3u);
  }
  const auto status = worker.process().wait_until(std::chrono::steady_clock::now() + 60s);
  ASSERT_TRUE(status) << "the worker did not exit";
  EXPECT_EQ(status->code, 0);
  EXPECT_NE(read_file(dir / "worker.err").find("idle for 500 ms, exiting"), std::string::npos);
}

}  // namespace
}  // namespace hearth::proof::testing
