// Verdicts from run results: pass, fail (a contract or a repeat), error (a failed run is never
// dropped), the one-line verdict, and that report.json and report.md carry what they promise.
#include <gtest/gtest.h>

#include "proof/report.h"
#include "proof_test_util.h"

namespace hearth::proof {
namespace {

using json = nlohmann::json;

Generation gen(std::vector<int32_t> tokens, double logprob = -1.0) {
  Generation g;
  g.tokens = tokens;
  g.logprobs.assign(tokens.size(), logprob);
  for (int32_t t : tokens) g.pieces.push_back(" w" + std::to_string(t));
  g.prompt_tokens = 3;
  g.stop = "length";
  g.timings = {{"ttft_ms", 2.0}, {"prefill_ms", 1.0}, {"decode_ms", 10.0}};
  return g;
}

RunResult ok(size_t prompt, size_t profile, int repeat, Generation g) {
  RunResult r;
  r.spec = {prompt, profile, repeat};
  r.generation = std::move(g);
  r.exit = ExitStatus{};
  r.wall_ms = 12;
  return r;
}

RunResult failed(size_t prompt, size_t profile, int repeat, const std::string& why) {
  RunResult r;
  r.spec = {prompt, profile, repeat};
  r.error = why;
  r.exit = ExitStatus{true, 9};
  r.stderr_tail = "hearth-worker: something\n";
  return r;
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"p0", "p1"}) {
      SuitePrompt p;
      p.id = id;
      p.text = "hello";
      suite_.prompts.push_back(p);
    }
    suite_.name = "mini";
    suite_.path = "mini.jsonl";
    suite_.checksum = "00";
    for (const char* label : {"a", "b"}) {
      ProofProfile p;
      p.label = label;
      p.settings = {{"seed", std::string(label) == "a" ? 1 : 2}};
      profiles_.push_back(p);
    }
  }
  json build(const std::vector<RunResult>& results, int repeat = 1) {
    options_.repeat = repeat;
    options_.budget = 4;
    ReportContext ctx;
    ctx.command = "hearth-proof run ...";
    ctx.machine = {{"hostname", "h"}};
    ctx.hearth = {{"version", "0.1.0"}};
    ctx.model = {{"mode", "single-process"}, {"weights_digest", "ab"}};
    ctx.suite = &suite_;
    ctx.profiles = &profiles_;
    ctx.contract = Contract::parse("exact");
    ctx.options = &options_;
    ctx.detokenizer = &detokenizer_;
    return build_report(ctx, results);
  }
  Suite suite_;
  std::vector<ProofProfile> profiles_;
  RunnerOptions options_;
  Detokenizer detokenizer_;
};

TEST_F(ReportTest, AllAgreeingIsAPass) {
  const json r = build({ok(0, 0, 0, gen({1, 2})), ok(0, 1, 0, gen({1, 2})), ok(1, 0, 0, gen({3})),
                        ok(1, 1, 0, gen({3}))});
  EXPECT_EQ(r["summary"]["verdict"], "pass");
  EXPECT_EQ(exit_code(r), kExitHolds);
  EXPECT_EQ(r["prompts"][0]["verdict"], "pass");
  EXPECT_EQ(r["prompts"][0]["comparisons"].size(), 1u);
  EXPECT_EQ(r["prompts"][0]["comparisons"][0]["kind"], "profile");
  EXPECT_EQ(r["prompts"][0]["runs"][1]["tokens"], json({1, 2}));
  EXPECT_EQ(r["prompts"][0]["runs"][1]["text"], " w1 w2");
  EXPECT_EQ(r["prompts"][0]["max_tokens"], 4);
  EXPECT_EQ(r["settings"]["text_source"], "stream");
  const std::string line = verdict_line(r, "/out");
  EXPECT_EQ(line.rfind("hearth-proof: PASS (exact): 2 prompts x 2 profiles", 0), 0u) << line;
  EXPECT_NE(line.find("/out/report.md"), std::string::npos) << line;
}

TEST_F(ReportTest, ADivergenceFailsItsPromptOnly) {
  const json r = build({ok(0, 0, 0, gen({1, 2, 3})), ok(0, 1, 0, gen({1, 2, 3})),
                        ok(1, 0, 0, gen({5, 6, 7})), ok(1, 1, 0, gen({5, 8, 7}))});
  EXPECT_EQ(r["summary"]["verdict"], "fail");
  EXPECT_EQ(r["summary"]["pass"], 1);
  EXPECT_EQ(r["summary"]["fail"], 1);
  EXPECT_EQ(exit_code(r), kExitViolated);
  const json& c = r["prompts"][1]["comparisons"][0];
  EXPECT_EQ(c["holds"], false);
  EXPECT_EQ(c["first_divergence"]["index"], 1);
  EXPECT_EQ(c["a"]["profile"], "a");
  EXPECT_EQ(c["b"]["profile"], "b");
  const std::string line = verdict_line(r, "/out");
  EXPECT_EQ(
      line.rfind(
          "hearth-proof: FAIL (exact): 1 of 2 prompts violate the contract (first: 'p1', a vs b: "
          "tokens differ at index 1 (6 vs 8))",
          0),
      0u)
      << line;
}

TEST_F(ReportTest, AFailedRunIsAnErrorAndNeverDropped) {
  const json r = build({ok(0, 0, 0, gen({1})), ok(0, 1, 0, gen({2})), ok(1, 0, 0, gen({1})),
                        failed(1, 1, 0, "worker killed by signal 9 (SIGKILL)")});
  EXPECT_EQ(r["summary"]["verdict"], "error");  // errors outrank the violation in p0
  EXPECT_EQ(r["summary"]["error"], 1);
  EXPECT_EQ(r["summary"]["failed_runs"], 1);
  EXPECT_EQ(exit_code(r), kExitError);
  EXPECT_EQ(r["prompts"][0]["verdict"], "fail");
  const json& p1 = r["prompts"][1];
  EXPECT_EQ(p1["verdict"], "error");
  EXPECT_EQ(p1["runs"][1]["status"], "error");
  EXPECT_EQ(p1["runs"][1]["error"], "worker killed by signal 9 (SIGKILL)");
  EXPECT_EQ(p1["runs"][1]["exit"], "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(p1["comparisons"][0]["holds"], nullptr);
  const std::string line = verdict_line(r, "/out");
  EXPECT_NE(line.find("ERROR (exact): 1 of 2 prompts have failed runs (first: 'p1', b run 0: "
                      "worker killed by signal 9"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("1 violate the contract"), std::string::npos) << line;
  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("## Errors"), std::string::npos);
  EXPECT_NE(md.find("hearth-worker: something"), std::string::npos);
}

TEST_F(ReportTest, RepeatsAreHeldToIdenticalLogprobs) {
  // Each profile twice; b's second run has the same tokens but other logprobs: nondeterminism.
  const json r = build({ok(0, 0, 0, gen({1})), ok(0, 0, 1, gen({1})), ok(0, 1, 0, gen({1})),
                        ok(0, 1, 1, gen({1}, -1.5)), ok(1, 0, 0, gen({4})), ok(1, 0, 1, gen({4})),
                        ok(1, 1, 0, gen({4})), ok(1, 1, 1, gen({4}))},
                       2);
  EXPECT_EQ(r["settings"]["repeat_contract"], "logprob:0");
  const json& p0 = r["prompts"][0];
  EXPECT_EQ(p0["verdict"], "fail");
  ASSERT_EQ(p0["comparisons"].size(), 3u);  // a vs b, a r1 vs a r0, b r1 vs b r0
  EXPECT_EQ(p0["comparisons"][2]["kind"], "repeat");
  EXPECT_EQ(p0["comparisons"][2]["holds"], false);
  EXPECT_EQ(p0["comparisons"][2]["b"]["repeat"], 1);
  EXPECT_EQ(r["prompts"][1]["verdict"], "pass");
  EXPECT_NE(verdict_line(r, "/o").find("b vs b (repeat 1): logprob differs by 0.5"),
            std::string::npos)
      << verdict_line(r, "/o");
}

TEST_F(ReportTest, FilesRoundTrip) {
  const json r = build({ok(0, 0, 0, gen({1, 2})), ok(0, 1, 0, gen({1, 9})), ok(1, 0, 0, gen({3})),
                        ok(1, 1, 0, gen({3}))});
  testing::TempDir dir;
  write_report(r, dir.path());
  const std::string text = testing::read_file(dir / "report.json");
  EXPECT_EQ(json::parse(text), r);
  EXPECT_EQ(
      text.rfind("{\n \"format\": \"hearth-proof-report\",\n \"version\": 1,\n \"summary\"", 0), 0u)
      << text.substr(0, 80);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n') > 10, true);
  const std::string md = testing::read_file(dir / "report.md");
  EXPECT_EQ(md.rfind("# hearth-proof: FAIL", 0), 0u);
  for (const char* section :
       {"## Profiles", "## Prompts", "## Divergences", "## Timings", "| p0 | **fail** |",
        "| p1 | pass |", "seed=2", "first differing token: index 1"})
    EXPECT_NE(md.find(section), std::string::npos) << section;
  EXPECT_FALSE(std::filesystem::exists(dir / "report.json.tmp"));
}

}  // namespace
}  // namespace hearth::proof
