// The hearth-worker command line for one run of one profile on one prompt, or for a batched
// worker running many, in single-process (`--model DIR`) or served (`--server SOCKET --model
// NAME`) mode.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "proof/profile_set.h"
#include "proof/suite.h"

namespace hearth::proof {

// Which weights the workers run on.
struct ModelSource {
  std::string model;                  // a model directory, or a model name on the server
  std::optional<std::string> server;  // the server's socket: served mode
};

std::vector<std::string> worker_command(const std::filesystem::path& worker,
                                        const ModelSource& source, const ProofProfile& profile,
                                        const SuitePrompt& prompt, std::optional<int> token_limit);

// A batched worker: `--requests FILE` (every run one request line) under a profile holding the
// worker's engine options.
std::vector<std::string> batched_worker_command(const std::filesystem::path& worker,
                                                const ModelSource& source,
                                                const std::filesystem::path& profile,
                                                const std::filesystem::path& requests);

}  // namespace hearth::proof
