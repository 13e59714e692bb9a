// Served against single-process: workers on a hearth-server's shared weights (memfd backend,
// CPU engine) give byte-identical tokens to workers that load the model themselves, and both
// reports name the same weights.
#include <gtest/gtest.h>

#include "proof_test_util.h"

namespace hearth::proof::testing {
namespace {

using namespace std::chrono_literals;

// A hearth-server on the default model for the length of a test.
class Server {
 public:
  explicit Server(const fs::path& dir) : socket_((dir / "sock" / "hearth.sock").string()) {
    process_.emplace(spawn_listening(
        {(bin_dir() / "hearth-server").string(), "--model", default_model().string() + ":fortunes",
         "--socket", socket_, "--backend", "memfd", "--quiet"},
        socket_, dir, "server"));
  }
  const std::string& socket() const { return socket_; }

 private:
  std::string socket_;
  std::optional<ChildProcess> process_;  // killed and reaped with the test
};

// hearth-proof run of `suite` under two CPU profiles, greedy and sampled (written into `dir`),
// 8 tokens a run, its report in dir/out; `extra` names the model and any other options.
CommandResult run_greedy_and_sampled(const fs::path& dir, const fs::path& suite,
                                     const std::string& out,
                                     const std::vector<std::string>& extra) {
  write_file(dir / "greedy.json", R"({"temperature": 0, "backend": "cpu"})");
  write_file(dir / "sampled.json",
             R"({"temperature": 0.8, "top_k": 40, "seed": 11, "backend": "cpu"})");
  std::vector<std::string> args = {(bin_dir() / "hearth-proof").string(),
                                   "run",
                                   "--suite",
                                   suite.string(),
                                   "--budget",
                                   "8",
                                   "--profile",
                                   (dir / "greedy.json").string(),
                                   "--profile",
                                   (dir / "sampled.json").string(),
                                   "--out",
                                   (dir / out).string(),
                                   "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_command(args, dir, 600s);
}

TEST(ProofServed, ServedWorkersMatchSingleProcessWorkers) {
  if (!fs::exists(bin_dir() / "hearth-server")) GTEST_SKIP() << "hearth-server is not built";
  TempDir dir;
  Server server(dir.path());
  // The first prompts of the short suite: enough to show it, few enough for a sanitizer build.
  const std::string short_suite =
      read_file(hearth::test::source_dir() / "proof" / "suites" / "short.jsonl");
  size_t end = 0;
  for (int line = 0; line < 6; ++line) end = short_suite.find('\n', end) + 1;
  const fs::path suite = dir / "short6.jsonl";
  write_file(suite, short_suite.substr(0, end));
  auto run = [&](const std::string& out, std::vector<std::string> model_args) {
    model_args.insert(model_args.begin(), {"--concurrency", "4"});
    return run_greedy_and_sampled(dir.path(), suite, out, model_args);
  };

  // Greedy and sampled differ (exit 1); what matters is that each is the same in both modes.
  const CommandResult served = run("served", {"--server", server.socket(), "--model", "fortunes"});
  EXPECT_EQ(served.exit_code(), 1) << served.out << served.err;
  const CommandResult single = run("single", {"--model", default_model().string()});
  EXPECT_EQ(single.exit_code(), 1) << single.out << single.err;

  const json rs = read_json(dir / "served" / "report.json"),
             r1 = read_json(dir / "single" / "report.json");
  EXPECT_EQ(rs["summary"]["error"], 0);
  EXPECT_EQ(rs["model"]["mode"], "served");
  EXPECT_EQ(rs["model"]["backend"], "memfd");
  EXPECT_EQ(rs["model"]["name"], "fortunes");
  EXPECT_EQ(rs["model"]["tensors"], 92);
  EXPECT_EQ(rs["model"]["tensor_checksums"].size(), 92u);
  EXPECT_EQ(rs["model"]["weights_digest"], r1["model"]["weights_digest"]);
  EXPECT_EQ(rs["settings"]["text_source"], "tokenizer");  // the manifest's tokenizer
  for (const json& p : rs["prompts"])
    for (const json& run : p["runs"]) {
      EXPECT_EQ(run["status"], "ok") << p["id"];
      EXPECT_TRUE(run["timings"].contains("attach_ms")) << "not a served worker";
    }

  const CommandResult d = run_command({(bin_dir() / "hearth-proof").string(), "diff",
                                       (dir / "single").string(), (dir / "served").string()},
                                      dir.path());
  EXPECT_EQ(d.exit_code(), 0) << d.out << d.err;
  EXPECT_EQ(d.out, "hearth-proof diff: SAME (exact): 6 prompts: 6 same, 0 changed, 0 error\n");
}

TEST(ProofServed, ABatchedServedWorkerMatchesAloneSingleProcessWorkers) {
  if (!fs::exists(bin_dir() / "hearth-server")) GTEST_SKIP() << "hearth-server is not built";
  TempDir dir;
  Server server(dir.path());
  write_file(dir / "suite.jsonl",
             "{\"id\":\"fox\",\"prompt\":\"The quick brown fox\"}\n"
             "{\"id\":\"ids\",\"prompt_tokens\":[0,300,301,302]}\n");
  auto run = [&](const std::string& out, std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--repeat", "2"});
    return run_greedy_and_sampled(dir.path(), dir / "suite.jsonl", out, extra);
  };
  const CommandResult batched =
      run("served-batched", {"--batched", "--server", server.socket(), "--model", "fortunes"});
  EXPECT_EQ(batched.exit_code(), 1) << batched.out << batched.err;  // greedy != sampled
  const CommandResult alone = run("single-alone", {"--model", default_model().string()});
  EXPECT_EQ(alone.exit_code(), 1) << alone.out << alone.err;

  const json rb = read_json(dir / "served-batched" / "report.json");
  EXPECT_EQ(rb["model"]["mode"], "served");
  EXPECT_EQ(rb["settings"]["batched"], true);
  EXPECT_EQ(rb["summary"]["failed_runs"], 0);
  for (const json& p : rb["prompts"])
    for (const json& run : p["runs"])
      EXPECT_TRUE(run["timings"].contains("attach_ms")) << "not a served worker";
  for (const char* contract : {"exact", "logprob:0"}) {
    const CommandResult d =
        run_command({(bin_dir() / "hearth-proof").string(), "diff", (dir / "single-alone").string(),
                     (dir / "served-batched").string(), "--contract", contract},
                    dir.path());
    EXPECT_EQ(d.exit_code(), 0) << d.out << d.err;
  }
}

TEST(ProofServed, AnUnknownServedModelIsRefusedUpFront) {
  if (!fs::exists(bin_dir() / "hearth-server")) GTEST_SKIP() << "hearth-server is not built";
  TempDir dir;
  Server server(dir.path());
  write_file(dir / "greedy.json", R"({"temperature": 0, "backend": "cpu"})");
  write_file(dir / "suite.jsonl", "{\"id\":\"a\",\"prompt\":\"x\"}\n");
  const CommandResult r = run_command(
      {(bin_dir() / "hearth-proof").string(), "run", "--suite", (dir / "suite.jsonl").string(),
       "--profile", (dir / "greedy.json").string(), "--profile", (dir / "greedy.json").string(),
       "--server", server.socket(), "--model", "no-such-model", "--out", (dir / "out").string()},
      dir.path());
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot read the manifest of model 'no-such-model'"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace hearth::proof::testing
