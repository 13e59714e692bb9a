// hearth-worker --requests: a file of requests run together in one engine, as real processes on
// the default model. Each request's events equal what the single-prompt command line writes for
// it (tokens, logprobs, text), bad lines are error events naming the line and field while the
// others finish, and a served worker (memfd weights) writes the same as a single-process one.
#include <gtest/gtest.h>

#include <optional>

#include "proof/worker_output.h"
#include "tests/proof/proof_test_util.h"
#include "worker/request_file.h"

namespace hearth::proof::testing {
namespace {

fs::path worker_bin() {
  return bin_dir() / "hearth-worker";
}

// hearth-worker loading the default model itself (CPU engine), with `args`, in `dir`.
CommandResult run_local_worker(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {worker_bin().string(), "--model", default_model().string(),
                                   "--backend", "cpu"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, dir.path());
}

// hearth-worker on the server at `socket`'s "fortunes", with `args`, in `dir`.
CommandResult run_served_worker(const TempDir& dir, const std::string& socket,
                                const std::vector<std::string>& args) {
  std::vector<std::string> argv = {worker_bin().string(), "--server", socket, "--model",
                                   "fortunes"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, dir.path());
}

// Requests in a file and the same settings as command-line flags.
struct Case {
  std::string id;
  std::string prompt;
  json settings;  // request keys
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"greedy", "A computer", {{"temperature", 0}, {"max_tokens", 12}}},
      {"warm",
       "Never trust a computer",
       {{"temperature", 0.8},
        {"top_p", 0.95},
        {"seed", 3},
        {"max_tokens", 20},
        {"logprobs", 2},
        {"ignore_eos", true}}},  // all 20 tokens, whatever the seed draws
      {"penalised",
       "Once upon a time",
       {{"temperature", 1.1},
        {"top_k", 40},
        {"repetition_penalty", 1.2},
        {"seed", 9},
        {"max_tokens", 16},
        {"ignore_eos", true}}},
      {"stopped", "The meaning of life is", {{"temperature", 0}, {"stop", {" the"}}}},
  };
  return c;
}

std::string request_file() {
  std::string text;
  for (const Case& c : cases()) {
    json line = c.settings;
    line["id"] = c.id;
    line["prompt"] = c.prompt;
    text += line.dump() + "\n";
  }
  text += R"({"id": "typo", "prompt": "x", "temprature": 1})"
          "\n\n";
  text += R"({"id": "too-long", "prompt_tokens": [0, 5, 6], "max_tokens": 600})"
          "\n";
  text += R"({"prompt": "no id"})"
          "\n";
  return text;
}

std::map<std::string, Generation> by_id(const std::string& out) {
  std::map<std::string, Generation> m;
  for (auto& [id, g] : parse_batched_worker_output(out)) m[id] = std::move(g);
  return m;
}

void expect_same(const Generation& a, const Generation& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (size_t i = 0; i < a.logprobs.size(); ++i)
    EXPECT_EQ(a.logprobs[i], b.logprobs[i]) << what << " token " << i;  // exact
  EXPECT_EQ(a.pieces, b.pieces) << what;
  EXPECT_EQ(a.stop, b.stop) << what;
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens) << what;
}

void check_batched_output(const std::map<std::string, Generation>& runs) {
  ASSERT_EQ(runs.size(), cases().size() + 3);
  EXPECT_EQ(runs.at("typo").stop, "error");
  EXPECT_NE(runs.at("typo").error.find("line 5 (request 'typo'): unknown request setting "
                                       "'temprature'"),
            std::string::npos)
      << runs.at("typo").error;
  EXPECT_EQ(runs.at("too-long").stop, "error");
  EXPECT_NE(
      runs.at("too-long")
          .error.find(
              "line 7: request 'too-long': max_tokens: 3 prompt tokens + 600 max_tokens exceed "
              "the context length 512"),
      std::string::npos)
      << runs.at("too-long").error;
  EXPECT_NE(runs.at("line 8").error.find("\"id\" must be a non-empty string"), std::string::npos);
  EXPECT_EQ(runs.at("stopped").stop, "stop");
}

TEST(WorkerRequests, EachRequestMatchesItsSinglePromptRun) {
  TempDir dir;
  write_file(dir / "requests.jsonl", request_file());
  const CommandResult batched =
      run_local_worker(dir, {"--requests", (dir / "requests.jsonl").string()});
  ASSERT_EQ(batched.exit_code(), 0) << batched.err;
  const auto runs = by_id(batched.out);
  check_batched_output(runs);

  for (const Case& c : cases()) {
    std::vector<std::string> args = {"--format", "jsonl", "--prompt", c.prompt};
    for (const auto& [key, value] : c.settings.items()) {
      args.push_back("--set");
      args.push_back(key + "=" + value.dump());
    }
    const CommandResult alone = run_local_worker(dir, args);
    ASSERT_EQ(alone.exit_code(), 0) << alone.err;
    expect_same(runs.at(c.id), parse_worker_output(alone.out), c.id);
  }
}

TEST(WorkerRequests, TopLogprobsComeWithTheTokensThatAskedForThem) {
  TempDir dir;
  write_file(dir / "requests.jsonl", request_file());
  const CommandResult r = run_local_worker(dir, {"--requests", (dir / "requests.jsonl").string()});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  int with_top = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const json e = json::parse(line);
    if (!e.contains("token")) continue;
    if (e["id"] == "warm") {
      ASSERT_TRUE(e.contains("top_logprobs")) << line;
      ASSERT_EQ(e["top_logprobs"].size(), 2u);
      ++with_top;
    } else {
      EXPECT_FALSE(e.contains("top_logprobs")) << line;
    }
  }
  EXPECT_EQ(with_top, 20);
}

// Issue 21: a line that nlohmann could not parse (a NUL reads as its end of input) was only
// "not a JSON object"; each line now goes through the one reader of outside JSON.
TEST(WorkerRequests, LinesThatAreNotJsonSayWhy) {
  const std::string text = std::string(1, '\0') + R"({"id":"a","prompt_tokens":[1]})" + "\n" +
                           R"({"id":"b","prompt_tokens":[1]}x)" + "\n" +
                           R"({"id":"c","prompt_tokens":[1]})" + "\n";
  const std::vector<RequestLine> lines = parse_request_lines(text, RequestSettings{}, nullptr);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].error.find("line 1: invalid JSON: contains a NUL byte at offset 0"),
            std::string::npos)
      << lines[0].error;
  EXPECT_NE(lines[1].error.find("line 2: invalid JSON"), std::string::npos) << lines[1].error;
  EXPECT_EQ(lines[2].error, "");
  EXPECT_EQ(lines[2].request.id, "c");
}

TEST(WorkerRequests, BadUsageIsAClearError) {
  TempDir dir;
  write_file(dir / "requests.jsonl", request_file());
  const std::string file = (dir / "requests.jsonl").string();
  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"--requests", file, "--format", "text"}, "--requests writes JSONL events"},
      {{"--requests", file, "--prompt", "hi"}, "excludes"},
      {{"--requests", (dir / "missing.jsonl").string()}, "missing.jsonl"},
  };
  for (const auto& [args, message] : bad) {
    const CommandResult r = run_local_worker(dir, args);
    EXPECT_NE(r.exit_code(), 0) << message;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
}

// A hearth-server on the default model (as "fortunes", memfd weights) with `extra` flags,
// listening at `socket` when this returns.
ChildProcess start_server(const TempDir& dir, const std::string& socket,
                          const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {(bin_dir() / "hearth-server").string(),
                                   "--model",
                                   default_model().string() + ":fortunes",
                                   "--socket",
                                   socket,
                                   "--backend",
                                   "memfd",
                                   "--quiet"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return spawn_listening(argv, socket, dir.path(), "server");
}

// A served test's scratch folder: the request file, and a hearth-server on the default model
// (with `server_flags`) listening at sock/hearth.sock in it.
struct ServedScratch {
  explicit ServedScratch(const std::vector<std::string>& server_flags = {})
      : file((dir / "requests.jsonl").string()), socket((dir / "sock" / "hearth.sock").string()) {
    write_file(file, request_file());
    server.emplace(start_server(dir, socket, server_flags));
  }
  TempDir dir;
  const std::string file, socket;
  std::optional<ChildProcess> server;  // stopped with the scratch
};

TEST(WorkerRequests, ServedWorkerWritesWhatASingleProcessOneWrites) {
  if (!fs::exists(bin_dir() / "hearth-server")) GTEST_SKIP() << "hearth-server is not built";
  const ServedScratch s;
  const CommandResult served = run_served_worker(s.dir, s.socket, {"--requests", s.file});
  const CommandResult local = run_local_worker(s.dir, {"--requests", s.file});
  ASSERT_EQ(served.exit_code(), 0) << served.err;
  ASSERT_EQ(local.exit_code(), 0) << local.err;
  const auto a = by_id(served.out), b = by_id(local.out);
  check_batched_output(a);
  for (const auto& [id, g] : b) expect_same(a.at(id), g, id);
}

// Issue 25: the server quantizes the default model to fp8 once at load; its workers (weights
// verified against the manifest's checksums) write what a single-process worker quantizing the
// same model writes, and that differs from the bf16 model's tokens or logprobs (fp8 was used).
TEST(WorkerRequests, ServedFp8WorkerWritesWhatASingleProcessFp8OneWrites) {
  if (!fs::exists(bin_dir() / "hearth-server")) GTEST_SKIP() << "hearth-server is not built";
  const ServedScratch s({"--quantize", "fp8"});
  const CommandResult served =
      run_served_worker(s.dir, s.socket, {"--verify-weights", "--requests", s.file});
  const CommandResult local = run_local_worker(s.dir, {"--quantize", "fp8", "--requests", s.file});
  const CommandResult bf16 = run_local_worker(s.dir, {"--requests", s.file});
  ASSERT_EQ(served.exit_code(), 0) << served.err;
  ASSERT_EQ(local.exit_code(), 0) << local.err;
  ASSERT_EQ(bf16.exit_code(), 0) << bf16.err;
  const auto a = by_id(served.out), b = by_id(local.out), c = by_id(bf16.out);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [id, g] : b) expect_same(a.at(id), g, id);
  EXPECT_NE(a.at("warm").logprobs, c.at("warm").logprobs);
}

// Issue 25's fp8 KV cache (kv_cache_dtype fp8_e4m3): a served worker, its pool leased from the
// server, writes what a single-process one writes, and both differ from the fp32 cache's
// logprobs (the cache was fp8).
TEST(WorkerRequests, ServedFp8KvWorkerWritesWhatASingleProcessOneWrites) {
  if (!fs::exists(bin_dir() / "hearth-server")) GTEST_SKIP() << "hearth-server is not built";
  const ServedScratch s;
  const std::string fp8_kv = "kv_cache_dtype=fp8_e4m3";
  const CommandResult served =
      run_served_worker(s.dir, s.socket, {"--set", fp8_kv, "--requests", s.file});
  const CommandResult local = run_local_worker(s.dir, {"--set", fp8_kv, "--requests", s.file});
  const CommandResult plain = run_local_worker(s.dir, {"--requests", s.file});
  ASSERT_EQ(served.exit_code(), 0) << served.err;
  ASSERT_EQ(local.exit_code(), 0) << local.err;
  ASSERT_EQ(plain.exit_code(), 0) << plain.err;
  const auto a = by_id(served.out), b = by_id(local.out), c = by_id(plain.out);
  check_batched_output(a);
  for (const auto& [id, g] : b) expect_same(a.at(id), g, id);
  EXPECT_NE(a.at("warm").logprobs, c.at("warm").logprobs);
}

}  // namespace
}  // namespace hearth::proof::testing
