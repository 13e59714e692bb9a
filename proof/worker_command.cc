#include "proof/worker_command.h"

namespace hearth::proof {

std::vector<std::string> worker_command(const std::filesystem::path& worker,
                                        const ModelSource& source, const ProofProfile& profile,
                                        const SuitePrompt& prompt, std::optional<int> token_limit) {
  std::vector<std::string> argv{worker.string()};
  if (source.server) argv.insert(argv.end(), {"--server", *source.server});
  argv.insert(argv.end(),
              {"--model", source.model, "--profile", profile.path.string(), "--format", "jsonl"});
  // The limit goes on the command line, where it overrides the profile's max_tokens: every
  // profile then generates over the same budget and only what the profiles mean to vary varies.
  if (token_limit) argv.insert(argv.end(), {"--max-tokens", std::to_string(*token_limit)});
  if (prompt.text) {
    // "--prompt=TEXT" rather than "--prompt TEXT": a prompt starting with '-' must not read as a
    // flag.
    argv.push_back("--prompt=" + *prompt.text);
  } else {
    std::string ids;
    for (int32_t t : prompt.tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
    argv.push_back("--prompt-tokens=" + ids);
  }
  return argv;
}

std::vector<std::string> batched_worker_command(const std::filesystem::path& worker,
                                                const ModelSource& source,
                                                const std::filesystem::path& profile,
                                                const std::filesystem::path& requests) {
  std::vector<std::string> argv{worker.string()};
  if (source.server) argv.insert(argv.end(), {"--server", *source.server});
  argv.insert(argv.end(), {"--model", source.model, "--profile", profile.string(), "--requests",
                           requests.string(), "--format", "jsonl"});
  return argv;
}

}  // namespace hearth::proof
