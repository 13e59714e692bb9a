// hearth-bench built without CUDA: the one mode that needs no GPU, the prefix-caching workload
// on the CPU engine (--serve-bench --shared-prefix, bench_prefix.h). The CUDA build's
// hearth-bench (bench_main.cc) has every mode, this one included.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ipc/main_guard.h"
#include "tools/bench_prefix.h"
#include "worker/engine/profile.h"

namespace {

using json = nlohmann::json;

int run(int argc, char** argv) {
  CLI::App app{
      "hearth-bench (built without CUDA): the prefix-caching workload on the CPU engine, "
      "--serve-bench --shared-prefix P"};
  hearth::bench::PrefixBenchOptions o;
  bool serve = false;
  std::vector<std::string> settings;
  std::string json_path;
  app.add_option("--model", o.model_dir, "model directory")->required();
  app.add_option("--label", o.label, "model label in the report (default: the directory)");
  app.add_flag("--serve-bench", serve, "the engine serving a workload (needs --shared-prefix here)")
      ->required();
  app.add_option("--output-tokens", o.output_tokens, "tokens generated per request")
      ->capture_default_str();
  app.add_option("--set", settings, "engine option key=value (repeatable)");
  app.add_option("--json", json_path, "also write the JSON report here");
  hearth::bench::add_prefix_bench_flags(app, o);
  CLI11_PARSE(app, argc, argv);
  if (app.count("--shared-prefix") == 0)
    throw std::runtime_error("built without CUDA, hearth-bench runs --shared-prefix only");
  hearth::Profile profile;
  profile.engine.backend = hearth::BackendKind::Cpu;
  for (const std::string& s : settings) hearth::apply_profile_setting(profile, s);
  o.engine = profile.engine;
  o.machine = hearth::bench::describe_host();
  const json report = hearth::bench::prefix_bench(o);
  std::printf("%s\n", report.dump().c_str());
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) throw std::runtime_error(json_path + ": cannot write");
    std::fprintf(f, "%s\n", report.dump(2).c_str());
    std::fclose(f);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-bench", [&] { return run(argc, argv); });
}
