// hearth-worker --serve as a real process on the default model: clients submit over the hearth
// protocol and collect their events; each request's tokens equal what --requests (and so the
// request alone) gives; ids are per client; refusals name the field; cancel, disconnect, idle
// exit and SIGTERM (in-flight requests end with an error event) behave as documented.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/socket.h>

#include <thread>
#include <tuple>

#include "ipc/client.h"
#include "ipc/frame.h"
#include "ipc/protocol.h"
#include "ipc/serve_limits.h"
#include "ipc/unix_socket.h"
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
    process_.emplace(spawn_listening(argv, socket_, dir.path(), "worker"));
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
      {{{"request", "hi"}}, "submit: \"request\" must be a JSON object"},
      {{{"request", request("c", "hi", json::object())}, {"stream", true}},
       "submit: unknown field 'stream' (it takes request)"},
      // Every event repeats the id: a 600 KB one made each event 600 KB.
      {{{"request", request(std::string(257, 'x'), "hi", json::object())}},
       "submit: \"id\" is 257 bytes (at most 256)"},
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
  // Cancel, events and stats take exactly their fields: the gateway once sent {"id": ...}
  // for cancel, which the worker refused, and the refusal went unseen.
  const std::tuple<std::string, json, std::string> bad_ops[] = {
      {"cancel", json::object(), "cancel needs a \"request_id\""},
      {"cancel", {{"request_id", 5}}, "cancel: \"request_id\" must be a non-empty string"},
      {"cancel",
       {{"request_id", "a"}, {"ids", {"a"}}},
       "cancel: unknown field 'ids' (it takes request_id)"},
      {"events", {{"wait", false}}, "events: unknown field 'wait' (it takes no arguments)"},
      {"stats", {{"reset", true}}, "stats: unknown field 'reset' (it takes no arguments)"},
  };
  for (const auto& [op, args, message] : bad_ops) {
    try {
      client.call(op, args);
      ADD_FAILURE() << op << " accepted " << args.dump();
    } catch (const ipc::ProtocolError& e) {
      EXPECT_EQ(e.code(), ipc::ErrorCode::kBadRequest);
      EXPECT_NE(e.message().find(message), std::string::npos) << e.message();
    }
  }
  // The connection is still good, and nothing is in flight: events answers at once.
  EXPECT_TRUE(client.call("events").body["events"].empty());
}

// The hello reply states the request frame limit and the longest sequence, room for a prompt of the
// whole context (512 positions, ids under 4,096) beside 1 MiB of everything else; such a submit is
// accepted (with max_tokens 0 it ends at once, no prefill to wait for).
TEST(WorkerServe, HelloStatesLimitsAndAWholeContextPromptFits) {
  TempDir dir;
  ServingWorker worker(dir, {"--quiet"});
  ipc::Client client = worker.connect();
  const json hello = client.server_hello();
  EXPECT_EQ(hello["max_request_bytes"], ipc::max_submit_bytes(512, 4096)) << hello.dump();
  EXPECT_EQ(hello["max_request_id_bytes"], ipc::kMaxRequestIdBytes);
  // The most prompt + max_tokens a request may ask for (the gateway's default max_tokens is
  // what it leaves after the prompt): the context here, the CPU pool holding all of it.
  EXPECT_EQ(hello["max_sequence_tokens"], 512) << hello.dump();
  json r = {{"id", "whole"},
            {"prompt_tokens", std::vector<int32_t>(512, 4095)},
            {"max_tokens", 0},
            {"cache_salt", std::string(900'000, 's')}};
  EXPECT_EQ(client.call("submit", {{"request", r}}).body["request_id"], "whole");
  EXPECT_EQ(tokens_of(collect(client, 1).at("whole")).stop, "length");
}

// A client that does not read its events: once they pass --event-buffer-kb its requests are
// held (the engine keeps their KV, schedules them no more) instead of its queue growing without
// bound; every events reply is bounded and says when more is waiting; reading lets them run
// again, and every event arrives: none dropped.
TEST(WorkerServe, ASlowReaderIsHeldAndLosesNothing) {
  TempDir dir;
  ServingWorker worker(dir, {"--quiet", "--event-buffer-kb", "8"});
  ipc::Client slow = worker.connect();
  ipc::Client watcher = worker.connect();
  constexpr int kRequests = 4, kTokens = 40;
  for (int i = 0; i < kRequests; ++i)
    slow.call(
        "submit",
        {{"request", request("r" + std::to_string(i), "A computer",
                             {{"max_tokens", kTokens}, {"ignore_eos", true}, {"logprobs", 20}})}});
  // All four held, well before they could finish: 160 events with 20 logprobs are ~120 KB.
  json stats;
  for (int i = 0; i < 30000; ++i) {
    stats = watcher.call("stats").body;
    if (stats["held"] == kRequests || stats["finished"] != 0) break;
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(stats["held"], kRequests) << stats.dump();
  EXPECT_EQ(stats["running"], kRequests) << stats.dump();  // still holding their KV
  EXPECT_GT(stats["kv_blocks_used"].get<int>(), 0) << stats.dump();
  EXPECT_LT(stats["generated_tokens"].get<int>(), kRequests * kTokens) << stats.dump();

  std::map<std::string, std::vector<Event>> got;
  int done = 0;
  bool saw_more = false;
  while (done < kRequests) {
    const json reply = slow.call("events").body;
    ASSERT_FALSE(reply["events"].empty());
    EXPECT_LE(reply["events"].dump().size(), size_t{8 << 10} + 4096);
    saw_more |= reply["more"].get<bool>();
    for (const json& e : reply["events"]) {
      Event event = event_from_json(e);
      done += event.done;
      got[event.id].push_back(std::move(event));
    }
  }
  EXPECT_TRUE(saw_more);
  ASSERT_EQ(got.size(), size_t(kRequests));
  for (const auto& [id, events] : got) {
    ASSERT_EQ(events.size(), size_t(kTokens + 1)) << id;
    EXPECT_EQ(events.back().summary.stop, "length") << id;
    EXPECT_EQ(events.back().summary.generated_tokens, kTokens) << id;
  }
  stats = watcher.call("stats").body;
  EXPECT_EQ(stats["held"], 0) << stats.dump();
  EXPECT_EQ(stats["kv_blocks_used"], 0) << stats.dump();
}

// Only the worker's parent (its supervisor) may stop it with a request: another process of the
// same uid is refused, naming who may; SIGTERM still works for anyone allowed to signal it.
TEST(WorkerServe, OnlyTheParentMayShutTheWorkerDown) {
  TempDir dir;
  ServingWorker worker(dir, {"--quiet"});
  const CommandResult other = run_command({(bin_dir() / "hearth-ctl").string(), "--socket",
                                           (dir / "sock" / "worker.sock").string(), "shutdown"},
                                          dir.path());
  EXPECT_NE(other.exit_code(), 0);
  EXPECT_NE(other.err.find("'shutdown' is an admin operation: only process " +
                           std::to_string(::getpid())),
            std::string::npos)
      << other.err;
  ipc::Client parent = worker.connect();  // this test started the worker
  EXPECT_EQ(parent.call("shutdown").body["stopping"], true);
  const auto status = worker.process().wait_until(std::chrono::steady_clock::now() + 60s);
  ASSERT_TRUE(status) << "the worker did not exit";
  EXPECT_EQ(status->code, 0);
}

// --idle-exit is read strictly: a value out of range once overflowed (exit at once) or meant
// "never" without a word.
TEST(WorkerServe, IdleExitValuesOutOfRangeAreRefused) {
  TempDir dir;
  for (const char* bad : {"1e10", "1e300", "nan", "inf", "-1", "0.0001", "0x10"}) {
    const CommandResult r =
        run_command({(bin_dir() / "hearth-worker").string(), "--model", default_model().string(),
                     "--serve", (dir / "never.sock").string(), "--idle-exit", bad},
                    dir.path());
    EXPECT_NE(r.exit_code(), 0) << bad;
    EXPECT_NE(r.err.find("'" + std::string(bad) +
                         "' is not 0 or a number of seconds from 0.001 to 1000000"),
              std::string::npos)
        << bad << ": " << r.err;
  }
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
    if (stats["running"] == 0 && stats["waiting"] == 0 && stats["finished"] == 2) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(stats["running"], 0) << stats.dump();
  EXPECT_EQ(stats["kv_blocks_used"], 0) << stats.dump();
  EXPECT_LT(stats["generated_tokens"].get<int>(), 400) << "the orphan ran to the end";
  EXPECT_EQ(stats["aborted"], 2) << stats.dump();  // the cancel and the disconnect
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

// U+0000 is a character of a prompt or a stop string like any other (it has a byte token, and
// vLLM takes it): a submit's texts arrive escaped ("\u0000") and are used whole, never cut
// there. A raw NUL byte is not JSON: that frame is refused naming the byte, its connection
// closes (a frame that cannot be read has no id to answer), and other clients carry on.
TEST(WorkerServe, ANulInAPromptOrStopIsTakenWholeAndARawNulByteIsNamed) {
  TempDir dir;
  ServingWorker worker(dir, {"--quiet"});
  ipc::Client client = worker.connect();
  const json greedy = {{"temperature", 0}, {"max_tokens", 6}};
  for (const auto& [id, prompt] :
       std::vector<std::pair<std::string, std::string>>{{"nul", std::string("A\0B", 3)},
                                                        {"nul-end", std::string("A\0", 2)},
                                                        {"short", "A"},
                                                        {"plain", "A computer"}})
    client.call("submit", {{"request", request(id, prompt, greedy)}});
  auto events = collect(client, 4);
  const auto prompt_tokens = [&](const std::string& id) {
    return events.at(id).back().summary.prompt_tokens;
  };
  // Cut at the NUL, "A\0B" and "A\0" would be "A"'s tokens; whole, the NUL and what follows
  // it each count.
  EXPECT_GT(prompt_tokens("nul"), prompt_tokens("nul-end"));
  EXPECT_GT(prompt_tokens("nul-end"), prompt_tokens("short"));

  // A stop string that ends in a NUL: cut there it would be the first token's text, and stop
  // at once (the control shows that one does); whole, it never matches.
  const Tokens plain = tokens_of(events.at("plain"));
  const std::string first = events.at("plain").front().token.text;
  ASSERT_FALSE(first.empty());
  json with_nul = greedy, without = greedy;
  with_nul["stop"] = {first + std::string(1, '\0')};
  without["stop"] = {first};
  client.call("submit", {{"request", request("stop-nul", "A computer", with_nul)}});
  client.call("submit", {{"request", request("stop-cut", "A computer", without)}});
  events = collect(client, 2);
  EXPECT_EQ(tokens_of(events.at("stop-nul")), plain);
  EXPECT_EQ(tokens_of(events.at("stop-cut")).stop, "stop");
  EXPECT_LT(tokens_of(events.at("stop-cut")).ids.size(), plain.ids.size());

  // The same submit with a raw NUL byte in its prompt, on a connection of its own.
  const UniqueFd raw = ipc::connect_unix((dir / "sock" / "worker.sock").string());
  ipc::send_frame(raw.get(),
                  ipc::make_request(ipc::op::kHello, 1, {{"version", ipc::kProtocolVersion}}));
  ipc::ReceiveOptions patience;
  patience.timeout = 60s;
  ASSERT_TRUE(ipc::receive_frame(raw.get(), patience));
  std::string frame = ipc::encode_frame(
      ipc::make_request(ipc::op::kSubmit, 2, {{"request", request("raw", "A#B", greedy)}}));
  const size_t hole = frame.find('#');
  frame[hole] = '\0';
  ASSERT_EQ(::send(raw.get(), frame.data(), frame.size(), MSG_NOSIGNAL), ssize_t(frame.size()));
  const auto reply = ipc::receive_frame(raw.get(), patience);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->body.value("ok", true), false) << reply->body.dump();
  EXPECT_EQ(reply->body["error"].value("code", ""), "bad_request") << reply->body.dump();
  EXPECT_NE(reply->body["error"]
                .value("message", "")
                .find("NUL byte at offset " + std::to_string(hole - ipc::kFrameHeaderBytes)),
            std::string::npos)
      << reply->body.dump();
  EXPECT_FALSE(ipc::receive_frame(raw.get(), patience)) << "the connection stays open";
  // The first client's connection is untouched.
  client.call("submit", {{"request", request("after", "A computer", greedy)}});
  EXPECT_EQ(tokens_of(collect(client, 1).at("after")), plain);
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
