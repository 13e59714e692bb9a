// Tensor parallelism served on GPUs (issue 26): a gateway whose own weight server puts each
// rank's pieces on its own GPU (--backend vmm --tensor-parallel 2) and CUDA workers driving
// both GPUs on the server's pieces (CudaTpBackend over EngineWeights::ranks). A completion and
// a chat completion give the tokens and logprob bits of a single-process CUDA TP=2 worker that
// cut its pieces itself, run after run. Skips with fewer than 2 GPUs.
#include <fstream>

#include <gtest/gtest.h>

#include "tests/gateway/gateway_process.h"
#include "tests/support/temp_dir.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth::test {
namespace {

struct Generation {
  std::string text;
  std::vector<double> logprobs;
  bool operator==(const Generation&) const = default;
};

Generation complete(const GatewayProcess& g, const std::string& model,
                    const std::vector<int32_t>& prompt) {
  const auto r = g.post("/v1/completions", {{"model", model},
                                            {"prompt", prompt},
                                            {"max_tokens", 32},
                                            {"temperature", 0},
                                            {"logprobs", 0}});
  EXPECT_EQ(r.status, 200) << r.body;
  Generation out;
  if (r.status != 200) return out;
  const json& choice = r.parsed()["choices"][0];
  out.text = choice["text"].get<std::string>();
  out.logprobs = choice["logprobs"]["token_logprobs"].get<std::vector<double>>();
  return out;
}

// The in-process CUDA TP=2 engine: a single-process worker that opens the model directory and
// cuts each rank's pieces onto GPU r itself.
Generation single_process(const std::vector<int32_t>& prompt, const TempDir& dir) {
  const auto requests = dir / "requests.jsonl";
  std::ofstream(requests)
      << json{{"id", "c"}, {"prompt_tokens", prompt}, {"max_tokens", 32}, {"temperature", 0}}.dump()
      << "\n";
  const auto out_file = dir / "out.jsonl";
  ChildProcess worker = ChildProcess::spawn(
      ChildProcess::Options({gateway_binary("hearth-worker"), "--model",
                             (source_dir() / "models/hearth-tiny-fortunes").string(), "--backend",
                             "cuda", "--requests", requests.string(), "--format", "jsonl", "--set",
                             "tensor_parallel=2"})
          .stdout_to(ChildProcess::Stream::file(out_file))
          .stderr_to(ChildProcess::Stream::file(dir / "err.log")));
  EXPECT_TRUE(worker.wait().success());
  Generation g;
  std::ifstream in(out_file);
  for (std::string line; std::getline(in, line);) {
    const json e = json::parse(line);
    if (!e.contains("token")) continue;
    g.text += e["text"].get<std::string>();
    g.logprobs.push_back(e["logprob"]);
  }
  return g;
}

TEST(GatewayTensorParallelGpu, ServedVmmTp2IsTheInProcessCudaTp2Engine) {
  if (vmm_device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, this machine has " << vmm_device_count();
  TempDir dir;
  const auto profile = dir / "tp2.json";
  std::ofstream(profile) << R"({"name": "tp2", "tensor_parallel": 2})";
  GatewayProcess g({"--backend", "vmm", "--tensor-parallel", "2", "--worker-arg=--backend",
                    "--worker-arg=cuda", "--profile", "tp2=" + profile.string()});
  const auto tokenized = g.post("/tokenize", {{"model", "fortunes"}, {"prompt", "A computer"}});
  ASSERT_EQ(tokenized.status, 200) << tokenized.body;
  const auto prompt = tokenized.parsed()["tokens"].get<std::vector<int32_t>>();

  const Generation served = complete(g, "fortunes:tp2", prompt);
  ASSERT_FALSE(served.logprobs.empty()) << g.log_text();
  EXPECT_EQ(served, single_process(prompt, dir));
  EXPECT_EQ(complete(g, "fortunes", prompt), served);  // the default profile takes degree 2
  EXPECT_EQ(complete(g, "fortunes:tp2", prompt), served);
}

}  // namespace
}  // namespace hearth::test
