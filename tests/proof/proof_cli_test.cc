// hearth-proof run end to end: real hearth-worker processes on the CPU engine and the committed
// default model. Identical profiles pass; a seed or a temperature alone makes them fail at the
// first divergence the workers themselves show; crashed, failing and hung workers are errors
// for their prompts; bad input is refused before any worker starts.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <thread>

#include "proof_test_util.h"

namespace hearth::proof::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kBudget = 12;

// Prompts as text (the worker tokenizes) and as token ids; "volcano" marks the one the wrapper
// scripts below misbehave on.
const char* kSuite =
    "{\"id\":\"fox\",\"prompt\":\"The quick brown fox\"}\n"
    "{\"id\":\"cynic\",\"prompt\":\"CYNIC, n.\"}\n"
    "{\"id\":\"volcano\",\"prompt\":\"The volcano erupted and\"}\n"
    "{\"id\":\"ids\",\"prompt_tokens\":[0,300,301,302],\"max_tokens\":6}\n";

class ProofRun : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "suite.jsonl", kSuite);
    write_file(dir_ / "greedy.json", R"({"temperature": 0, "seed": 7, "backend": "cpu"})");
    write_file(dir_ / "hot.json", R"({"temperature": 1.0, "seed": 7, "backend": "cpu"})");
    write_file(dir_ / "seed1.json", R"({"temperature": 1.0, "seed": 1, "backend": "cpu"})");
    write_file(dir_ / "seed2.json", R"({"temperature": 1.0, "seed": 2, "backend": "cpu"})");
    write_file(dir_ / "tiny-context.json",
               R"({"temperature": 0, "backend": "cpu", "context_length": 2})");
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  CommandResult proof(std::vector<std::string> args, std::chrono::seconds limit = 600s) {
    args.insert(args.begin(), (bin_dir() / "hearth-proof").string());
    return run_command(args, dir_.path(), limit);
  }

  // `run` over the test suite with the given profiles and extra arguments.
  CommandResult run(const std::vector<std::string>& profiles, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"run",
                                     "--suite",
                                     path("suite.jsonl"),
                                     "--budget",
                                     std::to_string(kBudget),
                                     "--model",
                                     default_model().string(),
                                     "--out",
                                     path("out"),
                                     "--quiet"};
    for (const std::string& p : profiles) args.insert(args.end(), {"--profile", path(p)});
    args.insert(args.end(), extra.begin(), extra.end());
    return proof(args);
  }

  json report() const { return read_json(dir_ / "out" / "report.json"); }

  // A --worker wrapper: runs the real worker, except on the "volcano" prompt where it runs
  // `misbehaviour` instead. With `fake_others` the other prompts get a canned one-token stream
  // at once: tests of deadlines must not depend on how fast a (sanitized, debug) worker is.
  std::string wrapper(const std::string& name, const std::string& misbehaviour,
                      bool fake_others = false) {
    const fs::path p = dir_ / name;
    const std::string others =
        fake_others ? "printf '%s\\n' '{\"token\":1,\"text\":\"a\",\"logprob\":-1}' "
                      "'{\"done\":true,\"stop\":\"length\",\"prompt_tokens\":3,\"generated_"
                      "tokens\":1,\"timings\":{}}'"
                    : "exec \"" + (bin_dir() / "hearth-worker").string() + "\" \"$@\"";
    write_file(p, "#!/bin/sh\ncase \"$*\" in\n  *volcano*) " + misbehaviour + " ;;\n  *) " +
                      others + " ;;\nesac\n");
    ::chmod(p.c_str(), 0755);
    return p.string();
  }

  // The same prompt run through hearth-worker directly for both profiles: where do they differ?
  void expect_divergences_as_the_workers_show(const json& r, const std::string& a,
                                              const std::string& b) {
    size_t diverged = 0;
    for (const json& p : r["prompts"]) {
      const std::string arg = p["prompt"].is_string()
                                  ? "--prompt=" + p["prompt"].get<std::string>()
                                  : "--prompt-tokens=" + [&] {
                                      std::string ids;
                                      for (const json& t : p["prompt"])
                                        ids += (ids.empty() ? "" : ",") + t.dump();
                                      return ids;
                                    }();
      const int limit = p["max_tokens"].get<int>();
      const DirectRun ra = run_worker_directly(dir_.path(), dir_ / a, arg, limit);
      const DirectRun rb = run_worker_directly(dir_.path(), dir_ / b, arg, limit);
      size_t i = 0;
      while (i < ra.tokens.size() && i < rb.tokens.size() && ra.tokens[i] == rb.tokens[i]) ++i;
      const bool same = ra.tokens == rb.tokens;
      const json& c = p["comparisons"][0];
      SCOPED_TRACE(p["id"].get<std::string>());
      EXPECT_EQ(p["runs"][0]["tokens"], json(ra.tokens));
      EXPECT_EQ(p["runs"][1]["tokens"], json(rb.tokens));
      EXPECT_EQ(p["verdict"], same ? "pass" : "fail");
      EXPECT_EQ(c["holds"], same);
      if (same) {
        EXPECT_TRUE(c["first_divergence"].is_null());
        continue;
      }
      ++diverged;
      ASSERT_TRUE(c["first_divergence"].is_object());
      EXPECT_EQ(c["first_divergence"]["index"], i);
      EXPECT_EQ(c["first_divergence"]["a_token"],
                i < ra.tokens.size() ? json(ra.tokens[i]) : json());
      EXPECT_EQ(c["first_divergence"]["b_token"],
                i < rb.tokens.size() ? json(rb.tokens[i]) : json());
      EXPECT_EQ(c["first_divergence"]["a_tokens"][0], c["first_divergence"]["a_token"]);
    }
    EXPECT_GT(diverged, 0u) << "the two profiles never diverged: the test proves nothing";
  }

  TempDir dir_;
};

TEST_F(ProofRun, IdenticalProfilesPass) {
  const CommandResult r = run({"greedy.json", "greedy.json"},
                              {"--repeat", "2", "--concurrency", "3", "--contract", "logprob:0"});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("hearth-proof: PASS (logprob:0): 4 prompts x 2 profiles x 2 repeats, every "
                        "contract holds",
                        0),
            0u)
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line on stdout";
  const json rep = report();
  EXPECT_EQ(rep["summary"]["verdict"], "pass");
  EXPECT_EQ(rep["summary"]["runs"], 16);
  EXPECT_EQ(rep["profiles"][0]["label"], "greedy");
  EXPECT_EQ(rep["profiles"][1]["label"], "greedy#2");
  for (const json& p : rep["prompts"]) {
    EXPECT_EQ(p["verdict"], "pass") << p["id"];
    EXPECT_EQ(p["comparisons"].size(), 3u);  // b vs a, and one repeat per profile
    for (const json& run : p["runs"]) {
      EXPECT_EQ(run["status"], "ok");
      EXPECT_GT(run["generated_tokens"].get<int>(), 0);
      EXPECT_TRUE(fs::exists(dir_ / "out" / run["stdout"].get<std::string>()));
      EXPECT_TRUE(run["timings"].contains("ttft_ms"));
    }
  }
  EXPECT_EQ(rep["prompts"][3]["max_tokens"], 6);  // the prompt's own cap under the budget
  EXPECT_EQ(rep["prompts"][0]["max_tokens"], kBudget);
  EXPECT_EQ(rep["model"]["mode"], "single-process");
  EXPECT_EQ(rep["model"]["weights_digest"].get<std::string>().size(), 32u);
  EXPECT_EQ(rep["model"]["tensors"], 92);
  EXPECT_EQ(rep["settings"]["text_source"], "tokenizer");
  EXPECT_EQ(rep["hearth"]["worker"]["version"], "hearth-worker 0.1.0");
  EXPECT_FALSE(rep["hearth"]["git_commit"].get<std::string>().empty());
  EXPECT_TRUE(rep["machine"].contains("hostname"));
  EXPECT_TRUE(rep["machine"]["gpus"].is_array());
  EXPECT_NE(read_file(dir_ / "out" / "report.md").find("# hearth-proof: PASS"), std::string::npos);
}

TEST_F(ProofRun, ProfilesDifferingOnlyInSeedFailAtTheFirstDivergence) {
  const CommandResult r = run({"seed1.json", "seed2.json"}, {"--concurrency", "2"});
  EXPECT_EQ(r.exit_code(), 1) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("hearth-proof: FAIL (exact): ", 0), 0u) << r.out;
  expect_divergences_as_the_workers_show(report(), "seed1.json", "seed2.json");
}

TEST_F(ProofRun, ProfilesDifferingOnlyInTemperatureFailAtTheFirstDivergence) {
  const CommandResult r = run({"greedy.json", "hot.json"});
  EXPECT_EQ(r.exit_code(), 1) << r.out << r.err;
  expect_divergences_as_the_workers_show(report(), "greedy.json", "hot.json");
}

TEST_F(ProofRun, TextContractComparesTheDecodedText) {
  const CommandResult r = run({"seed1.json", "seed2.json"}, {"--contract", "text"});
  EXPECT_EQ(r.exit_code(), 1) << r.out << r.err;
  bool text_divergence = false;
  const json rep = report();
  for (const json& p : rep["prompts"]) {
    const json& c = p["comparisons"][0];
    EXPECT_EQ(c["contract"], "text");
    const bool texts_equal = p["runs"][0]["text"] == p["runs"][1]["text"];
    EXPECT_EQ(c["holds"], texts_equal) << p["id"];
    if (!texts_equal) {
      text_divergence = true;
      EXPECT_TRUE(c["text_divergence"].is_object());
    }
  }
  EXPECT_TRUE(text_divergence);
}

TEST_F(ProofRun, AWorkerKilledMidRunIsAnErrorForItsPrompt) {
  // On "volcano" the wrapper passes on the worker's first line, then SIGKILLs itself.
  const std::string worker =
      wrapper("killer.sh",
              "\"" + (bin_dir() / "hearth-worker").string() +
                  "\" \"$@\" | { IFS= read -r first; printf '%s\\n' \"$first\"; kill -KILL $$; }");
  const CommandResult r =
      run({"greedy.json", "greedy.json"}, {"--worker", worker, "--concurrency", "2"});
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  EXPECT_NE(
      r.out.find("hearth-proof: ERROR (exact): 1 of 4 prompts have failed runs (first: 'volcano'"),
      std::string::npos)
      << r.out;
  const json rep = report();
  EXPECT_EQ(rep["summary"]["error"], 1);
  EXPECT_EQ(rep["summary"]["pass"], 3);
  EXPECT_EQ(rep["summary"]["failed_runs"], 2);
  for (const json& p : rep["prompts"]) {
    if (p["id"] != "volcano") {
      EXPECT_EQ(p["verdict"], "pass") << p["id"];
      continue;
    }
    EXPECT_EQ(p["verdict"], "error");
    for (const json& run : p["runs"]) {
      EXPECT_EQ(run["status"], "error");
      EXPECT_EQ(run["error"], "worker killed by signal 9 (SIGKILL)");
      // What it wrote before it died is kept for the post-mortem.
      EXPECT_NE(read_file(dir_ / "out" / run["stdout"].get<std::string>()).find("\"token\""),
                std::string::npos);
    }
  }
  EXPECT_NE(read_file(dir_ / "out" / "report.md").find("## Errors"), std::string::npos);
  EXPECT_TRUE(processes_mentioning(dir_.path().string()).empty()) << "a worker outlived the run";
}

TEST_F(ProofRun, AWorkerThatFailsIsAnErrorWithItsMessage) {
  // A valid profile the worker cannot run: no prompt fits a context of 2 tokens.
  const CommandResult r = run({"greedy.json", "tiny-context.json"});
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  const json rep = report();
  EXPECT_EQ(rep["summary"]["error"], 4);
  for (const json& p : rep["prompts"]) {
    EXPECT_EQ(p["verdict"], "error");
    EXPECT_EQ(p["runs"][0]["status"], "ok");
    const json& bad = p["runs"][1];
    EXPECT_EQ(bad["status"], "error");
    EXPECT_NE(bad["error"].get<std::string>().find(
                  "worker exit status 1: hearth-worker: error: prompt: "),
              std::string::npos)
        << bad["error"];
    EXPECT_NE(bad["error"].get<std::string>().find("tokens exceed the context length 2"),
              std::string::npos);
    EXPECT_NE(bad["stderr_tail"].get<std::string>().find("hearth-worker: error"),
              std::string::npos);
  }
}

TEST_F(ProofRun, AWorkerThatWritesGarbageIsAnError) {
  // Exit status 0 is not enough: the stream must be the worker's format, summary included.
  const std::string worker =
      wrapper("garbage.sh", "echo 'Segmentation fault? no, just text'", /*fake_others=*/true);
  const CommandResult r = run({"greedy.json", "greedy.json"}, {"--worker", worker});
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  const json rep = report();
  EXPECT_EQ(rep["summary"]["error"], 1);
  EXPECT_EQ(rep["prompts"][2]["runs"][0]["error"], "worker output line 1: not a JSON object");
  EXPECT_EQ(rep["prompts"][2]["runs"][0]["exit"], "exit status 0");
}

TEST_F(ProofRun, AHungWorkerIsKilledAtTheTimeout) {
  // The hanging worker marks when it is running, so the interrupt finds it hung.
  const fs::path hung = dir_ / "hung";
  const std::string worker =
      wrapper("hang.sh", ": > '" + hung.string() + "'; sleep 1000; :", /*fake_others=*/true);
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r = run({"greedy.json", "greedy.json"},
                              {"--worker", worker, "--timeout", "1", "--concurrency", "2"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 120s);
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  const json rep = report();
  for (const json& p : rep["prompts"]) {
    EXPECT_EQ(p["verdict"], p["id"] == "volcano" ? "error" : "pass") << p["id"];
    if (p["id"] == "volcano") {
      EXPECT_EQ(p["runs"][0]["error"], "timed out after 1 s; the worker was killed");
    }
  }
  EXPECT_TRUE(processes_mentioning(dir_.path().string()).empty())
      << "a hung worker outlived the run";
}

TEST_F(ProofRun, InterruptKillsTheWorkersAndStillWritesTheReport) {
  // The hanging worker marks when it is running, so the interrupt finds it hung.
  const fs::path hung = dir_ / "hung";
  const std::string worker =
      wrapper("hang.sh", ": > '" + hung.string() + "'; sleep 1000; :", /*fake_others=*/true);
  ChildProcess proof_process = ChildProcess::spawn(
      ChildProcess::Options({(bin_dir() / "hearth-proof").string(), "run", "--suite",
                             path("suite.jsonl"), "--model", default_model().string(), "--out",
                             path("out"), "--profile", path("greedy.json"), "--profile",
                             path("greedy.json"), "--worker", worker, "--quiet"})
          .stdout_to(ChildProcess::Stream::file(dir_ / "proof.out"))
          .stderr_to(ChildProcess::Stream::file(dir_ / "proof.err")));
  for (int i = 0; i < 6000 && !fs::exists(hung); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(fs::exists(hung));
  ::kill(proof_process.pid(), SIGINT);
  const auto status = proof_process.wait_until(std::chrono::steady_clock::now() + 60s);
  ASSERT_TRUE(status) << "hearth-proof did not stop after SIGINT";
  EXPECT_EQ(status->describe(), "exit status 2");
  const json rep = report();
  EXPECT_EQ(rep["summary"]["verdict"], "error");
  EXPECT_EQ(rep["prompts"][2]["runs"][0]["error"], "interrupted: the worker was killed");
  EXPECT_EQ(rep["prompts"][3]["runs"][0]["error"], "not run: the proof run was interrupted");
  EXPECT_TRUE(processes_mentioning(dir_.path().string()).empty())
      << "a worker outlived the interrupted run";
}

// Bad input: exit 2, a message naming the problem, and no worker started.
struct BadInput {
  std::string name;
  std::vector<std::string> args;  // replaces the matching defaults
  std::string message;
};

void PrintTo(const BadInput& input, std::ostream* os) {
  *os << input.name;
}

class ProofBadInput : public ProofRun, public ::testing::WithParamInterface<BadInput> {};

TEST_P(ProofBadInput, IsRefusedBeforeAnyWorkerStarts) {
  write_file(dir_ / "broken-suite.jsonl",
             "{\"id\":\"a\",\"prompt\":\"x\"}\n{\"id\":\"a\",\"prompt\":\"y\"}\n");
  write_file(dir_ / "typo.json", R"({"temprature": 0})");
  write_file(dir_ / "range.json", R"({"top_p": 7})");
  fs::create_directories(dir_ / "someone-elses");
  write_file(dir_ / "someone-elses" / "notes.txt", "keep me");
  write_file(dir_ / "not-executable", "#!/bin/sh\n");

  std::map<std::string, std::string> opt = {{"--suite", path("suite.jsonl")},
                                            {"--model", default_model().string()},
                                            {"--out", path("out")}};
  std::vector<std::string> profiles = {path("greedy.json"), path("greedy.json")};
  std::vector<std::string> extra;
  const auto& given = GetParam().args;
  for (size_t i = 0; i < given.size(); i += 2) {
    std::string value = given[i + 1];
    for (const char* name : {"broken-suite.jsonl", "typo.json", "range.json", "someone-elses",
                             "not-executable", "missing.json", "greedy.json"})
      if (value == name) value = path(name);
    if (given[i] == "--profile") {
      profiles = {path("greedy.json"), value};
    } else if (given[i] == "--only-profile") {
      profiles = {value};
    } else if (opt.count(given[i])) {
      opt[given[i]] = value;
    } else {
      extra.insert(extra.end(), {given[i], value});
    }
  }
  std::vector<std::string> args = {"run"};
  for (const auto& [k, v] : opt) args.insert(args.end(), {k, v});
  for (const std::string& p : profiles) args.insert(args.end(), {"--profile", p});
  args.insert(args.end(), extra.begin(), extra.end());

  const CommandResult r = proof(args);
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  EXPECT_NE(r.err.find(GetParam().message), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "runs" / "000-fox"))
      << "a worker ran despite the bad input";
  EXPECT_EQ(read_file(dir_ / "someone-elses" / "notes.txt"), "keep me");
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, ProofBadInput,
    ::testing::Values(
        BadInput{"SuiteMissing",
                 {"--suite", "/nonexistent/suite.jsonl"},
                 "--suite /nonexistent/suite.jsonl: no such file"},
        BadInput{"SuiteDuplicateId",
                 {"--suite", "broken-suite.jsonl"},
                 "broken-suite.jsonl:2: duplicate id \"a\""},
        BadInput{
            "ProfileUnknownKey", {"--profile", "typo.json"}, "unknown profile key 'temprature'"},
        BadInput{"ProfileOutOfRange",
                 {"--profile", "range.json"},
                 "range.json: profile key 'top_p': must be in ["},
        BadInput{
            "ProfileMissing", {"--profile", "missing.json"}, "missing.json: no such profile file"},
        BadInput{"NothingToCompare", {"--only-profile", "greedy.json"}, "nothing to compare"},
        BadInput{
            "UnknownContract", {"--contract", "bitwise"}, "--contract: unknown contract 'bitwise'"},
        BadInput{"BadEpsilon", {"--contract", "logprob:-1"}, "EPS must be a finite number >= 0"},
        BadInput{"ModelMissing",
                 {"--model", "/nonexistent/model"},
                 "/nonexistent/model: no such model directory"},
        BadInput{"ServerMissing",
                 {"--server", "/nonexistent/hearth.sock"},
                 "cannot read the manifest of model"},
        BadInput{
            "WorkerMissing", {"--worker", "/nonexistent/hearth-worker"}, "not an executable file"},
        BadInput{"WorkerNotExecutable", {"--worker", "not-executable"}, "not an executable file"},
        BadInput{"OutHoldsSomethingElse",
                 {"--out", "someone-elses"},
                 "not empty and holds no hearth-proof report"},
        BadInput{"BudgetZero", {"--budget", "0"}, "--budget"},
        BadInput{"ConcurrencyZero", {"--concurrency", "0"}, "--concurrency"},
        BadInput{"TimeoutNegative", {"--timeout", "-1"}, "--timeout"},
        BadInput{"TimeoutNaN", {"--timeout", "nan"}, "'nan' is not a finite number"},
        BadInput{"UnknownOption", {"--bogus", "1"}, "--bogus"}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; });

TEST_F(ProofRun, HelpIsThereForEveryCommand) {
  const CommandResult top = proof({"--help"});
  EXPECT_EQ(top.exit_code(), 0);
  EXPECT_NE(top.out.find("run"), std::string::npos);
  EXPECT_NE(top.out.find("diff"), std::string::npos);
  const CommandResult run_help = proof({"run", "--help"});
  EXPECT_EQ(run_help.exit_code(), 0);
  for (const char* flag : {"--profile", "--suite", "--budget", "--contract", "--server", "--model",
                           "--concurrency", "--repeat", "--timeout", "--out", "--worker"})
    EXPECT_NE(run_help.out.find(flag), std::string::npos) << flag;
  const CommandResult diff_help = proof({"diff", "--help"});
  EXPECT_EQ(diff_help.exit_code(), 0);
  EXPECT_NE(diff_help.out.find("REPORT_A"), std::string::npos);
  const CommandResult none = proof({});
  EXPECT_EQ(none.exit_code(), 2);
  EXPECT_NE(none.err.find("subcommand"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace hearth::proof::testing
