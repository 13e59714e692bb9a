// What the served tensor-parallel tests compare a gateway's answers with: a single-process
// hearth-worker opening the default model directory itself, generating greedily from the same
// prompt tokens (jsonl output: each token's text and logprob).
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "tests/gateway/gateway_process.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {

// One generation: its text and every token's logprob.
struct Generation {
  std::string text;
  std::vector<double> logprobs;
  bool operator==(const Generation&) const = default;
};

// `worker_args` follow the model directory (e.g. --backend cuda --set tensor_parallel=2); the
// worker's stderr is left in dir/err.log.
inline Generation single_process_generation(const std::vector<int32_t>& prompt, int max_tokens,
                                            const TempDir& dir,
                                            const std::vector<std::string>& worker_args) {
  const auto requests = dir / "requests.jsonl";
  std::ofstream(requests) << json{{"id", "c"},
                                  {"prompt_tokens", prompt},
                                  {"max_tokens", max_tokens},
                                  {"temperature", 0}}
                                 .dump()
                          << "\n";
  const auto out_file = dir / "out.jsonl";
  std::vector<std::string> args = {gateway_binary("hearth-worker"),
                                   "--model",
                                   (source_dir() / "models/hearth-tiny-fortunes").string(),
                                   "--requests",
                                   requests.string(),
                                   "--format",
                                   "jsonl"};
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  ChildProcess worker =
      ChildProcess::spawn(ChildProcess::Options(args)
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

}  // namespace hearth::test
