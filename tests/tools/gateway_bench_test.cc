// hearth-gateway-bench against a real hearth-gateway (CPU workers, the default model) on
// 127.0.0.1, a few requests each: --logprobs counts the logprobs of every token, and --mixed
// sends the lengths its seed draws (tools/mixed_workload.h).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/child_process.h"
#include "tests/gateway/gateway_process.h"
#include "tools/mixed_workload.h"

namespace hearth::test {
namespace {

struct BenchRun {
  ExitStatus status;
  json report;
  std::string table;
};

BenchRun run_bench(int port, std::vector<std::string> args) {
  std::vector<std::string> argv = {gateway_binary("hearth-gateway-bench"), "--port",
                                   std::to_string(port)};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess bench =
      ChildProcess::spawn(ChildProcess::Options(argv).stdout_to(ChildProcess::Stream::pipe()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  const std::string out = bench.stdout_pipe().read_to_end(deadline);
  BenchRun run;
  run.status = bench.wait();
  // The JSON report, then a blank line and the table.
  const size_t table = out.find("\n\n|");
  if (table == std::string::npos) throw std::runtime_error("no table in: " + out);
  run.report = json::parse(out.substr(0, table));
  run.table = out.substr(table + 2);
  return run;
}

TEST(GatewayBench, CountsTheLogprobsOfEveryToken) {
  GatewayProcess gateway;
  const BenchRun run =
      run_bench(gateway.port(), {"--concurrency", "2", "--requests", "4", "--prompt-tokens", "8",
                                 "--max-tokens", "6", "--logprobs", "3"});
  ASSERT_TRUE(run.status.success()) << run.report.dump(2);
  const json& r = run.report;
  EXPECT_EQ(r["settings"]["logprobs"], 3);
  EXPECT_EQ(r["requests_ok"], 4);
  EXPECT_EQ(r["output_tokens"], 4 * 6);
  // Every token came with its logprob, and with alternatives beside the chosen token: three
  // asked for, so more entries than tokens unless every alternative's text were the chosen one's.
  EXPECT_EQ(r["logprob_tokens"], r["output_tokens"]);
  EXPECT_GT(r["top_logprob_entries"].get<int>(), r["logprob_tokens"].get<int>());
  EXPECT_LE(r["top_logprob_entries"].get<int>(), 4 * r["logprob_tokens"].get<int>());
  EXPECT_NE(run.table.find("| 2 | 8 / 6 | 3 | 4/4 |"), std::string::npos) << run.table;
}

TEST(GatewayBench, MixedSendsTheLengthsItsSeedDraws) {
  GatewayProcess gateway;
  const int requests = 6;
  const BenchRun run = run_bench(
      gateway.port(), {"--concurrency", "3", "--requests", std::to_string(requests), "--mixed",
                       "--seed", "7", "--min-prompt", "4", "--max-prompt", "40", "--min-output",
                       "2", "--max-output", "12", "--vocab", "300"});
  ASSERT_TRUE(run.status.success()) << run.report.dump(2);
  const json& r = run.report;
  EXPECT_EQ(r["settings"]["mixed"], true);
  EXPECT_EQ(r["settings"]["seed"], 7);
  const auto draws = bench::mixed_draws(7, requests, {4, 40, 2, 12}, 300);
  ASSERT_EQ(r["per_request"].size(), size_t(requests));
  int total = 0;
  for (int i = 0; i < requests; ++i) {
    const json& got = r["per_request"][i];
    EXPECT_EQ(got["index"], i);
    // What the gateway counted: the drawn prompt reached the model, the drawn length came out.
    EXPECT_EQ(got["prompt_tokens"], int(draws[i].prompt.size())) << i;
    EXPECT_EQ(got["completion_tokens"], draws[i].max_tokens) << i;
    total += draws[i].max_tokens;
  }
  EXPECT_EQ(r["output_tokens"], total);
  // The seed decides the draw: another gives other lengths.
  const auto other = bench::mixed_draws(8, requests, {4, 40, 2, 12}, 300);
  bool differs = false;
  for (int i = 0; i < requests; ++i)
    differs |= other[i].prompt.size() != draws[i].prompt.size() ||
               other[i].max_tokens != draws[i].max_tokens;
  EXPECT_TRUE(differs);
  EXPECT_GT(r["itl_p99_over_p50"].get<double>(), 0.0);
  EXPECT_NE(run.table.find("mixed 4-40 / 2-12 (seed 7)"), std::string::npos) << run.table;
}

}  // namespace
}  // namespace hearth::test
