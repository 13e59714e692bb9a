// hearth-bench --serve-bench --mixed: the batched CUDA engine under mixed lengths, as a gateway
// sees them: prompts of 16 to 1,024 tokens and outputs of 16 to 512 (seeded, uniform), kept
// `streams` at a time in one engine (a finished request is replaced at once) until `requests`
// ran, once per decode_step_tokens (the tokens a step may hold once it carries decodes; 0: off,
// every step up to max_batch_tokens). Reports inter-token latency, time to first token, output
// tok/s and step wall / device time per budget: what a prompt chunk costs the decodes that
// share its step.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/engine/engine_options.h"

namespace hearth::bench {

struct MixedBenchOptions {
  std::string model_dir, label;
  int streams = 64, requests = 192;
  int min_prompt = 16, max_prompt = 1024, min_output = 16, max_output = 512;
  std::vector<int> budgets = {0, 1024, 512, 256};  // decode_step_tokens, one run each
  float temperature = 0;
  EngineOptions engine;  // --set engine options; decode_step_tokens comes from `budgets`
};

// Prints progress on stderr and a table on stdout; returns the measurements as JSON.
nlohmann::json mixed_bench(const MixedBenchOptions& options);

}  // namespace hearth::bench
