// hearth-bench --serve-bench --shared-prefix P: what prefix caching buys and costs. N requests
// share a P-token prefix, each with its own S-token suffix and O greedy output tokens, kept C at
// a time in one engine; run with the cache on and off, then again with N distinct prefixes (a 0%
// hit rate, where the cache can only cost). Reports mean and p99 time to first token, total
// time, output tok/s and cached tokens per run, as JSON and a table. Backend-generic: the CPU
// engine on a tiny model runs it too (`--set backend=cpu`).
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "worker/engine/engine_options.h"

namespace hearth::bench {

struct PrefixBenchOptions {
  std::string model_dir, label;
  int requests = 64, concurrency = 64;
  int prefix_tokens = 2000, suffix_tokens = 64, output_tokens = 128;
  EngineOptions engine;  // --set; max_running defaults to the concurrency
  nlohmann::json machine = nlohmann::json::object();  // the caller's description of the machine
};

// This host: its name, CPU model and core count (the CUDA build adds the GPU).
nlohmann::json describe_host();

// The mode's own flags (--shared-prefix and the rest), shared by both builds of hearth-bench.
void add_prefix_bench_flags(CLI::App& app, PrefixBenchOptions& options);

// Prints progress on stderr and a table on stdout; returns the measurements as JSON.
nlohmann::json prefix_bench(const PrefixBenchOptions& options);

}  // namespace hearth::bench
