// hearth-proof diff on real reports: the same outputs (also at another concurrency) are the same;
// a changed profile or a single edited token is a change, found at the right index; reports
// that cannot be compared are errors.
#include <gtest/gtest.h>

#include "proof_test_util.h"

namespace hearth::proof::testing {
namespace {

using namespace std::chrono_literals;

const char* kSuite =
    "{\"id\":\"fox\",\"prompt\":\"The quick brown fox\"}\n"
    "{\"id\":\"cynic\",\"prompt\":\"CYNIC, n.\"}\n"
    "{\"id\":\"ids\",\"prompt_tokens\":[0,300,301,302]}\n";

class ProofDiff : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "suite.jsonl", kSuite);
    fs::create_directories(dir_ / "before");
    fs::create_directories(dir_ / "after");
    write_file(dir_ / "greedy.json", R"({"temperature": 0, "backend": "cpu"})");
    write_file(dir_ / "before" / "sampled.json",
               R"({"temperature": 1.0, "seed": 1, "backend": "cpu"})");
    write_file(dir_ / "after" / "sampled.json",
               R"({"temperature": 1.0, "seed": 2, "backend": "cpu"})");
  }

  CommandResult proof(std::vector<std::string> args) {
    args.insert(args.begin(), (bin_dir() / "hearth-proof").string());
    return run_command(args, dir_.path(), 600s);
  }

  // A run of greedy and `sampled` (from `which` folder) into `out`.
  void run(const std::string& which, const std::string& out,
           const std::string& suite = "suite.jsonl", const std::string& concurrency = "1") {
    const CommandResult r =
        proof({"run", "--suite", (dir_ / suite).string(), "--budget", "10", "--model",
               default_model().string(), "--profile", (dir_ / "greedy.json").string(), "--profile",
               (dir_ / which / "sampled.json").string(), "--concurrency", concurrency, "--out",
               (dir_ / out).string(), "--quiet"});
    ASSERT_TRUE(r.exit_code() == 0 || r.exit_code() == 1) << r.out << r.err;
  }

  CommandResult diff(const std::string& a, const std::string& b,
                     std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"diff", (dir_ / a).string(), (dir_ / b).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return proof(args);
  }

  TempDir dir_;
};

TEST_F(ProofDiff, TheSameOutputsAtAnotherConcurrencyAreTheSame) {
  run("before", "one");
  run("before", "three", "suite.jsonl", "3");
  const CommandResult r = diff("one", "three/report.json", {"--out", (dir_ / "d").string()});
  EXPECT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(r.out, "hearth-proof diff: SAME (exact): 3 prompts: 3 same, 0 changed, 0 error\n");
  const json d = read_json(dir_ / "d" / "diff.json");
  EXPECT_EQ(d["verdict"], "same");
  bool concurrency_listed = false;
  for (const json& c : d["context_differences"])
    if (c["key"] == "/settings/concurrency") concurrency_listed = c["a"] == 1 && c["b"] == 3;
  EXPECT_TRUE(concurrency_listed) << d["context_differences"].dump();
  EXPECT_NE(read_file(dir_ / "d" / "diff.md").find("# hearth-proof diff: SAME"), std::string::npos);
}

TEST_F(ProofDiff, AChangedProfileIsFoundWhereTheTokensDiverge) {
  run("before", "before-run");
  run("after", "after-run");
  const CommandResult r = diff("before-run", "after-run");
  EXPECT_EQ(r.exit_code(), 1) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("hearth-proof diff: CHANGED (exact): ", 0), 0u) << r.out;

  // What changed, worked out from the two reports' own tokens.
  const json a = read_json(dir_ / "before-run" / "report.json"),
             b = read_json(dir_ / "after-run" / "report.json");
  diff("before-run", "after-run", {"--out", (dir_ / "d").string()});
  const json d = read_json(dir_ / "d" / "diff.json");
  size_t changed = 0;
  for (size_t i = 0; i < a["prompts"].size(); ++i) {
    const auto ta = a["prompts"][i]["runs"][1]["tokens"].get<std::vector<int>>();
    const auto tb = b["prompts"][i]["runs"][1]["tokens"].get<std::vector<int>>();
    size_t k = 0;
    while (k < ta.size() && k < tb.size() && ta[k] == tb[k]) ++k;
    const json& greedy = d["prompts"][i]["profiles"][0];
    const json& sampled = d["prompts"][i]["profiles"][1];
    EXPECT_EQ(greedy["profile"], "greedy");
    EXPECT_EQ(greedy["comparison"]["holds"], true);  // greedy did not change
    EXPECT_EQ(sampled["comparison"]["holds"], ta == tb);
    if (ta != tb) {
      ++changed;
      EXPECT_EQ(sampled["comparison"]["first_divergence"]["index"], k);
    }
  }
  EXPECT_GT(changed, 0u);
  EXPECT_EQ(d["summary"]["changed"], changed);
}

TEST_F(ProofDiff, ASingleEditedTokenIsAChange) {
  run("before", "a");
  json edited = read_json(dir_ / "a" / "report.json");
  json& tokens = edited["prompts"][1]["runs"][0]["tokens"];
  ASSERT_GT(tokens.size(), 3u);
  tokens[3] = tokens[3].get<int>() + 1;
  fs::create_directories(dir_ / "b");
  write_file(dir_ / "b" / "report.json", edited.dump());
  const CommandResult r = diff("a", "b");
  EXPECT_EQ(r.exit_code(), 1) << r.out << r.err;
  EXPECT_NE(r.out.find("1 changed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("'cynic', greedy: tokens differ at index 3"), std::string::npos) << r.out;
}

TEST_F(ProofDiff, ReportsThatCannotBeComparedAreErrors) {
  run("before", "a");
  write_file(dir_ / "other.jsonl", "{\"id\":\"fox\",\"prompt\":\"The quick brown fox\"}\n");
  run("before", "other", "other.jsonl");
  CommandResult r = diff("a", "other");
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.out.find("the reports are of different suites"), std::string::npos) << r.out;

  json renamed = read_json(dir_ / "a" / "report.json");
  renamed["profiles"][1]["label"] = "renamed";
  fs::create_directories(dir_ / "renamed");
  write_file(dir_ / "renamed" / "report.json", renamed.dump());
  r = diff("a", "renamed");
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.out.find("the reports ran different profiles"), std::string::npos) << r.out;

  json failed = read_json(dir_ / "a" / "report.json");
  failed["prompts"][0]["runs"][0] = {
      {"profile", "greedy"}, {"repeat", 0}, {"status", "error"}, {"error", "boom"}};
  fs::create_directories(dir_ / "failed");
  write_file(dir_ / "failed" / "report.json", failed.dump());
  r = diff("a", "failed");
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.out.find("'fox', greedy: the run failed in"), std::string::npos) << r.out;

  write_file(dir_ / "garbage.json", "{\"hello\": 1}");
  r = diff("a", "garbage.json");
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.err.find("garbage.json: not a hearth-proof report"), std::string::npos) << r.err;
  r = diff("a", "missing.json");
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.err.find("missing.json: cannot open"), std::string::npos) << r.err;
  r = diff("a", "a", {"--contract", "nope"});
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(r.err.find("unknown contract 'nope'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hearth::proof::testing
