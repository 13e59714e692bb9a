// hearth-proof run --batched end to end: every run one request of a real `hearth-worker
// --requests` on the CPU engine and the default model. Batched reports diff SAME against alone
// ones, repeats in one worker agree, differing engine options get their own worker, and a worker
// that crashes, hangs or is interrupted fails each of its requests, never hangs the run.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <thread>

#include "proof_test_util.h"

namespace hearth::proof::testing {
namespace {

using namespace std::chrono_literals;

const char* kSuite =
    "{\"id\":\"fox\",\"prompt\":\"The quick brown fox\"}\n"
    "{\"id\":\"cynic\",\"prompt\":\"CYNIC, n.\"}\n"
    "{\"id\":\"volcano\",\"prompt\":\"The volcano erupted and\",\"max_tokens\":9}\n"
    "{\"id\":\"ids\",\"prompt_tokens\":[0,300,301,302],\"max_tokens\":6}\n";

class ProofBatched : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "suite.jsonl", kSuite);
    write_file(dir_ / "greedy.json", R"({"name": "greedy", "temperature": 0, "backend": "cpu"})");
    write_file(dir_ / "sampled.json",
               R"({"name": "sampled", "temperature": 0.9, "top_k": 40, "top_p": 0.95,
                   "repetition_penalty": 1.1, "seed": 1234, "backend": "cpu"})");
    // Engine options that differ (fewer sequences at once, prompts in chunks) but must not
    // change a token.
    write_file(dir_ / "greedy-narrow.json",
               R"({"name": "narrow", "temperature": 0, "backend": "cpu", "max_running": 3,
                   "max_batch_tokens": 5})");
    write_file(dir_ / "tiny-context.json",
               R"({"name": "tiny", "temperature": 0, "backend": "cpu", "context_length": 2})");
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  CommandResult proof(std::vector<std::string> args) {
    args.insert(args.begin(), (bin_dir() / "hearth-proof").string());
    return run_command(args, dir_.path(), 600s);
  }

  CommandResult run(const std::string& out, const std::vector<std::string>& profiles,
                    std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"run",    "--suite", path("suite.jsonl"),      "--budget",
                                     "12",     "--model", default_model().string(), "--out",
                                     path(out)};
    for (const std::string& p : profiles) args.insert(args.end(), {"--profile", path(p)});
    args.insert(args.end(), extra.begin(), extra.end());
    return proof(args);
  }

  CommandResult diff(const std::string& a, const std::string& b, const std::string& contract) {
    return proof({"diff", path(a), path(b), "--contract", contract});
  }

  json report(const std::string& out) const { return read_json(dir_ / out / "report.json"); }

  // A --worker wrapper running `body`; `--version` (asked once per proof run) still answers.
  std::string script(const std::string& name, const std::string& body) {
    const fs::path p = dir_ / name;
    write_file(p, "#!/bin/sh\n[ \"$1\" = --version ] && exec \"" +
                      (bin_dir() / "hearth-worker").string() + "\" --version\n" + body + "\n");
    ::chmod(p.c_str(), 0755);
    return p.string();
  }

  // Whether every process that mentions this test's folder is gone. A worker SIGKILLed with its
  // group can linger in /proc for a moment while the kernel tears it down; one that survived
  // the kill stays.
  bool no_worker_left() const {
    for (int i = 0; i < 1000; ++i) {
      if (processes_mentioning(dir_.path().string()).empty()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  TempDir dir_;
};

TEST_F(ProofBatched, BatchedIsTheSameAsAloneForGreedyAndSampledProfiles) {
  const std::vector<std::string> profiles = {"greedy.json", "sampled.json"};
  // Greedy and sampled differ (exit 1); what matters is that each is the same both ways.
  const CommandResult alone = run("alone", profiles, {"--repeat", "2", "--concurrency", "2"});
  ASSERT_EQ(alone.exit_code(), 1) << alone.out << alone.err;
  const CommandResult batched = run("batched", profiles, {"--repeat", "2", "--batched"});
  ASSERT_EQ(batched.exit_code(), 1) << batched.out << batched.err;
  EXPECT_NE(batched.err.find("batched worker 1 of 1: 16 requests, profiles greedy, sampled"),
            std::string::npos)
      << batched.err;

  const json rb = report("batched");
  EXPECT_EQ(rb["settings"]["batched"], true);
  EXPECT_TRUE(rb["settings"]["concurrency"].is_null()) << "no workers run side by side";
  ASSERT_EQ(rb["settings"]["batched_workers"].size(), 1u);
  EXPECT_EQ(rb["settings"]["batched_workers"][0]["profiles"], json({"greedy", "sampled"}));
  EXPECT_EQ(rb["settings"]["batched_workers"][0]["engine_options"]["backend"], "cpu");
  EXPECT_FALSE(rb["settings"]["batched_workers"][0]["engine_options"].contains("seed"));
  EXPECT_EQ(report("alone")["settings"]["batched"], false);
  EXPECT_EQ(rb["summary"]["failed_runs"], 0);
  size_t differing = 0;
  for (const json& p : rb["prompts"]) {
    SCOPED_TRACE(p["id"].get<std::string>());
    for (const json& c : p["comparisons"]) {
      if (c["kind"] == "repeat") {
        EXPECT_EQ(c["holds"], true) << "repeats in one worker differ";
      }
    }
    differing += p["runs"][0]["tokens"] != p["runs"][2]["tokens"];
    for (const json& run : p["runs"]) {
      EXPECT_EQ(run["status"], "ok");
      EXPECT_LE(run["generated_tokens"].get<int>(), p["max_tokens"].get<int>());
      // The run's own file holds its own events only, as an alone run's does.
      const std::string events = read_file(dir_ / "batched" / run["stdout"].get<std::string>());
      const std::string id = run["stdout"].get<std::string>().substr(5);  // past "runs/"
      EXPECT_EQ(std::count(events.begin(), events.end(), '\n'),
                run["generated_tokens"].get<int>() + 1);
      EXPECT_NE(events.find("\"id\":\"" + id.substr(0, id.size() - 6) + "\""), std::string::npos)
          << events;
    }
  }
  EXPECT_GT(differing, 0u) << "greedy and sampled never differ: the test proves nothing";

  for (const char* contract : {"exact", "logprob:0"}) {
    const CommandResult d = diff("alone", "batched", contract);
    EXPECT_EQ(d.exit_code(), 0) << d.out << d.err;
    EXPECT_EQ(d.out, std::string("hearth-proof diff: SAME (") + contract +
                         "): 4 prompts: 4 same, 0 changed, 0 error\n");
  }
}

TEST_F(ProofBatched, ProfilesWithDifferentEngineOptionsGetTheirOwnWorkers) {
  const CommandResult r =
      run("out", {"greedy.json", "sampled.json", "greedy-narrow.json"}, {"--batched"});
  ASSERT_EQ(r.exit_code(), 1) << r.out << r.err;  // sampled differs from greedy
  EXPECT_NE(r.err.find("batched worker 1 of 2: 8 requests, profiles greedy, sampled"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("batched worker 2 of 2: 4 requests, profiles narrow (its own worker: "
                       "engine options differ from worker 1's: max_batch_tokens 2048 -> 5, "
                       "max_running 256 -> 3)"),
            std::string::npos)
      << r.err;
  const json rep = report("out");
  ASSERT_EQ(rep["settings"]["batched_workers"].size(), 2u);
  EXPECT_EQ(rep["settings"]["batched_workers"][1]["profiles"], json({"narrow"}));
  EXPECT_EQ(rep["settings"]["batched_workers"][1]["engine_options"]["max_running"], 3);
  const json worker2 = read_json(dir_ / "out" / "runs" / "batched-worker-2" / "profile.json");
  EXPECT_EQ(worker2["max_batch_tokens"], 5);
  EXPECT_FALSE(worker2.contains("temperature")) << "request settings travel with the requests";
  for (const json& p : rep["prompts"]) {
    SCOPED_TRACE(p["id"].get<std::string>());
    // The narrow worker runs 3 sequences at once and prompts in chunks of 5: same tokens.
    EXPECT_EQ(p["runs"][2]["profile"], "narrow");
    EXPECT_EQ(p["runs"][2]["tokens"], p["runs"][0]["tokens"]);
    EXPECT_EQ(p["runs"][2]["logprobs"], p["runs"][0]["logprobs"]);
  }
}

TEST_F(ProofBatched, ARequestTheWorkerRefusesIsAnErrorAndTheOthersCarryOn) {
  // No prompt fits a context of 2 tokens: every request of that worker is refused.
  const CommandResult r = run("out", {"greedy.json", "tiny-context.json"}, {"--batched"});
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  const json rep = report("out");
  EXPECT_EQ(rep["summary"]["failed_runs"], 4);
  for (const json& p : rep["prompts"]) {
    EXPECT_EQ(p["runs"][0]["status"], "ok");
    const std::string error = p["runs"][1]["error"];
    EXPECT_EQ(error.rfind("the worker failed the request: ", 0), 0u) << error;
    EXPECT_NE(error.find("exceed the context length 2"), std::string::npos) << error;
  }
}

TEST_F(ProofBatched, ACrashingWorkerFailsEveryRequestItHeld) {
  // Passes on the worker's first three events, then SIGKILLs itself: no request has finished.
  const std::string worker = script("crash.sh", "\"" + (bin_dir() / "hearth-worker").string() +
                                                    "\" \"$@\" | { head -n 3; kill -KILL $$; }");
  const CommandResult r =
      run("out", {"greedy.json", "sampled.json"}, {"--batched", "--worker", worker});
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  const json rep = report("out");
  EXPECT_EQ(rep["summary"]["failed_runs"], 8);
  EXPECT_EQ(rep["summary"]["error"], 4);
  for (const json& p : rep["prompts"]) {
    for (const json& run : p["runs"]) {
      EXPECT_EQ(run["status"], "error");
      EXPECT_EQ(run["error"],
                "batched worker killed by signal 9 (SIGKILL) (before this request finished)");
    }
  }
  EXPECT_TRUE(no_worker_left()) << "a worker outlived the run";
}

TEST_F(ProofBatched, AWorkerThatFailsAfterFinishingEveryRequestStillFailsThem) {
  // The whole stream, then exit status 3: a crash must not pass unseen behind complete output.
  const std::string worker =
      script("late.sh", "\"" + (bin_dir() / "hearth-worker").string() + "\" \"$@\"; exit 3");
  const CommandResult r =
      run("out", {"greedy.json", "sampled.json"}, {"--batched", "--worker", worker});
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  const json rep = report("out");
  EXPECT_EQ(rep["summary"]["failed_runs"], 8);
  for (const json& p : rep["prompts"]) {
    for (const json& run : p["runs"]) {
      EXPECT_EQ(run["error"], "batched worker exit status 3 (after this request finished)");
      // Its output is kept for the post-mortem.
      EXPECT_NE(read_file(dir_ / "out" / run["stdout"].get<std::string>()).find("\"done\""),
                std::string::npos);
    }
  }
}

TEST_F(ProofBatched, TheTimeoutBoundsTheWholeWorker) {
  // The worker marks when it is running, so the interrupt finds it hung, whatever the load.
  const fs::path hung = dir_ / "hung";
  const std::string worker = script("hang.sh", ": > '" + hung.string() + "'; sleep 1000");
  const CommandResult r = run("out", {"greedy.json", "sampled.json"},
                              {"--batched", "--worker", worker, "--timeout", "1"});
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  const json rep = report("out");
  EXPECT_EQ(rep["summary"]["failed_runs"], 8);
  for (const json& p : rep["prompts"]) {
    for (const json& run : p["runs"]) {
      EXPECT_EQ(run["error"],
                "batched worker timed out after 1 s; the worker was killed (before this request "
                "finished)");
    }
  }
  EXPECT_TRUE(no_worker_left()) << "a hung worker outlived it";
}

TEST_F(ProofBatched, InterruptKillsTheWorkerAndStillWritesTheReport) {
  // Two workers (different engine options): the first hangs and is interrupted, the second is
  // never started.
  // The worker marks when it is running, so the interrupt finds it hung, whatever the load.
  const fs::path hung = dir_ / "hung";
  const std::string worker = script("hang.sh", ": > '" + hung.string() + "'; sleep 1000");
  ChildProcess proof_process = ChildProcess::spawn(
      ChildProcess::Options(
          {(bin_dir() / "hearth-proof").string(), "run", "--suite", path("suite.jsonl"), "--model",
           default_model().string(), "--out", path("out"), "--profile", path("greedy.json"),
           "--profile", path("greedy-narrow.json"), "--worker", worker, "--batched", "--quiet"})
          .stdout_to(ChildProcess::Stream::file(dir_ / "proof.out"))
          .stderr_to(ChildProcess::Stream::file(dir_ / "proof.err")));
  for (int i = 0; i < 6000 && !fs::exists(hung); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(fs::exists(hung));
  ::kill(proof_process.pid(), SIGINT);
  const auto status = proof_process.wait_until(std::chrono::steady_clock::now() + 60s);
  ASSERT_TRUE(status) << "hearth-proof did not stop after SIGINT";
  EXPECT_EQ(status->code, 2) << read_file(dir_ / "proof.err");
  const json rep = report("out");
  for (const json& p : rep["prompts"]) {
    EXPECT_EQ(p["runs"][0]["error"],
              "batched worker interrupted: the worker was killed (before this request finished)");
    EXPECT_EQ(p["runs"][1]["error"], "not run: the proof run was interrupted");
  }
  EXPECT_TRUE(no_worker_left());
}

TEST_F(ProofBatched, ConcurrencyIsRefusedWithBatched) {
  const CommandResult r =
      run("out", {"greedy.json"}, {"--repeat", "2", "--batched", "--concurrency", "4"});
  EXPECT_EQ(r.exit_code(), 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--concurrency excludes --batched"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "report.json"));
}

}  // namespace
}  // namespace hearth::proof::testing
