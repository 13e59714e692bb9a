// hearth-bench --serve-bench: the batched CUDA engine serving a fixed workload at several
// concurrencies, each level's requests submitted at once into one Engine: aggregate output
// tok/s, time to first token and inter-token latency (p50, p99), KV pool use, and the fraction
// of the bandwidth roofline (every step reads the weights once, every token its sequence's KV).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/engine/engine_options.h"

namespace hearth::bench {

struct ServeBenchOptions {
  std::string model_dir, label;
  std::vector<int> concurrency = {1, 8, 32, 64, 128, 256};
  int prompt_tokens = 128, output_tokens = 256;
  float temperature = 0;  // 0: greedy
  double copy_gbps = 3020;
  EngineOptions engine;  // --set engine options; max_running defaults to the top concurrency
  // Every request asks for response_format json_object (the model's tokenizer.json gives the
  // vocabulary's bytes), and the decode breakdown's sampling masks every row: the cost of
  // structured output.
  bool json_object = false;
};

// Prints progress on stderr and a table on stdout; returns the measurements as JSON.
nlohmann::json serve_bench(const ServeBenchOptions& options);

}  // namespace hearth::bench
