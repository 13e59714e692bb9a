// The tiny model served sharded by a hearth-server process (issue 26, memfd backend), and the
// hearth-worker runs the sharded server tests compare: a TP=2 worker on the server's pieces
// against single-process workers reading the directory.
#pragma once

#include <string>
#include <vector>

#include "tests/weight-server/daemon/server_test_support.h"

namespace hearth::test {

// hearth-server's flags for the tiny model as "tiny", cut for `tensor_parallel` ranks, then
// `extra` (such as --quantize fp8).
inline std::vector<std::string> sharded_server_args(int tensor_parallel,
                                                    const std::vector<std::string>& extra = {}) {
  return concat(
      {"--backend", "memfd", "--quiet", "--tensor-parallel", std::to_string(tensor_parallel)},
      concat(extra, {"--model", tiny_model_dir().string() + ":tiny"}));
}

// hearth-worker's flags taking the weights from `server`'s "tiny", verified.
inline std::vector<std::string> served_tiny(const ServerProcess& server) {
  return {"--server", server.socket(), "--model", "tiny", "--verify-weights"};
}

// hearth-worker's flags taking the weights from the tiny model's directory, then `extra`.
inline std::vector<std::string> tiny_directory(const std::vector<std::string>& extra = {}) {
  return concat({"--model", tiny_model_dir().string()}, extra);
}

// `weights` (where the worker reads its model), then a sampled 24-token run of `seed` with EOS
// ignored, then tensor_parallel 2.
inline std::vector<std::string> tp2_generation(std::vector<std::string> weights, int seed) {
  return concat(concat(std::move(weights), generation_args(seed, 24, /*ignore_eos=*/true)),
                {"--set", "tensor_parallel=2"});
}

}  // namespace hearth::test
