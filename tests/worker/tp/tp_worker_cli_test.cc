// hearth-worker with tensor_parallel_processes (issue 26) as real processes on the default
// model: single-process (the followers cut their pieces from the directory) and served from a
// hearth-server --tensor-parallel 2 (each process imports only its rank's pieces), both giving
// the token lines (ids, text, logprobs as printed) of the single-process in-process ranks.
#include <gtest/gtest.h>

#include "tests/weight-server/daemon/server_test_support.h"

namespace hearth {
namespace {

using test::concat;
using test::generation_args;

const std::vector<std::string> kTp2 = {"--set", "tensor_parallel=2"};
const std::vector<std::string> kProcesses = {"--set", "tensor_parallel_processes=true"};

std::vector<std::string> in_process_tokens(const test::TempDir& dir) {
  const test::WorkerRun run = test::run_worker(
      dir,
      concat(concat({"--model", test::tiny_model_dir().string()}, generation_args(5, 24, true)),
             kTp2));
  EXPECT_TRUE(run.status.success()) << run.err;
  return test::parse_stream(run.out).tokens;
}

TEST(TpWorkerCli, ProcessesGiveTheInProcessRanksTokens) {
  test::TempDir dir;
  const std::vector<std::string> want = in_process_tokens(dir);
  ASSERT_EQ(want.size(), 24u);
  const test::WorkerRun run =
      test::run_worker(dir, concat(concat(concat({"--model", test::tiny_model_dir().string()},
                                                 generation_args(5, 24, true)),
                                          kTp2),
                                   kProcesses));
  ASSERT_TRUE(run.status.success()) << run.err;
  EXPECT_EQ(test::parse_stream(run.out).tokens, want);
}

TEST(TpWorkerCli, ServedProcessesImportTheirOwnRanksAndGiveTheSameTokens) {
  test::ServerProcess server({"--backend", "memfd", "--quiet", "--tensor-parallel", "2", "--model",
                              test::tiny_model_dir().string() + ":tiny"});
  const std::vector<std::string> want = in_process_tokens(server.dir());
  const test::WorkerRun run = test::run_worker(
      server.dir(), concat(concat(concat({"--server", server.socket(), "--model", "tiny"},
                                         generation_args(5, 24, true)),
                                  kTp2),
                           kProcesses));
  ASSERT_TRUE(run.status.success()) << run.err;
  EXPECT_EQ(test::parse_stream(run.out).tokens, want);
  // A degree the model cannot take is refused by name (2 KV heads, 4 ranks).
  const test::WorkerRun four = test::run_worker(
      server.dir(),
      concat(concat({"--server", server.socket(), "--model", "tiny"}, generation_args(5, 4, true)),
             {"--set", "tensor_parallel=4", "--set", "tensor_parallel_processes=true"}));
  EXPECT_FALSE(four.status.success());
  EXPECT_NE(four.err.find("num_key_value_heads 2 is not a multiple of 4"), std::string::npos)
      << four.err;
}

}  // namespace
}  // namespace hearth
