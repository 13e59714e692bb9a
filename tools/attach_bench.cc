// hearth-attach-bench: what it costs a worker to join a running hearth-server. For one served
// model it measures attach time (connect + manifest + import + map of every tensor), worker
// process start to first token, the server's upload throughput (from its stats), and device
// memory with N attached workers (one copy of the weights whatever N is). Prints one JSON
// object on stdout and a short table on stderr.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#if HEARTH_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "ipc/child_process.h"
#include "ipc/client.h"
#include "ipc/main_guard.h"
#include "weight-server/sharing/model_import.h"
#include "weight-server/sharing/vmm_backend.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

json summarize(std::vector<double> v) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  return {{"min", v.front()}, {"median", v[v.size() / 2]}, {"max", v.back()}, {"runs", v.size()}};
}

hearth::ipc::Client connect(const std::string& socket) {
  hearth::ipc::ClientOptions options;
  options.name = "hearth-attach-bench";
  options.timeout = std::chrono::minutes(5);
  return hearth::ipc::Client::connect(socket, options);
}

// A worker or holder process: stdout on a pipe this side reads, stderr shared with ours, stdin
// a pipe (whose closing tells a holder to let go) or /dev/null.
hearth::ChildProcess start_child(const std::vector<std::string>& args, bool stdin_pipe) {
  using Stream = hearth::ChildProcess::Stream;
  return hearth::ChildProcess::spawn(hearth::ChildProcess::Options(args)
                                         .stdin_from(stdin_pipe ? Stream::pipe() : Stream::null())
                                         .stdout_to(Stream::pipe())
                                         .stderr_to(Stream::inherit()));
}

// Closes stdin, reads what is left of stdout and waits for the exit.
hearth::ExitStatus finish(hearth::ChildProcess& child) {
  child.close_stdin();
  child.stdout_pipe().read_to_end();
  return child.wait();
}

std::string self_path() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

// Device memory in use on `device`, all processes together (bytes), or nullopt without CUDA.
std::optional<uint64_t> device_used_bytes([[maybe_unused]] int device) {
#if HEARTH_HAVE_CUDA
  size_t free = 0, total = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess)
    return std::nullopt;
  return uint64_t(total - free);
#else
  return std::nullopt;
#endif
}

// Shmem in /proc/meminfo (bytes): where memfd weights are counted, once.
uint64_t shmem_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Shmem:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// Child mode: attach (or, with `context_only`, only create a CUDA context), say so, and hold
// until stdin closes.
int hold(const std::string& socket, const std::string& model, bool context_only, bool verify) {
  const Clock::time_point start = Clock::now();
  std::optional<hearth::ipc::Client> client;
  hearth::ImportedModel imported;
  if (context_only) {
#if HEARTH_HAVE_CUDA
    if (cudaFree(nullptr) != cudaSuccess) throw std::runtime_error("cannot create a CUDA context");
#endif
  } else {
    client.emplace(connect(socket));
    imported = hearth::import_served_model(*client, model, {.verify = verify});
  }
  std::printf("READY %.3f\n", ms_since(start));
  std::fflush(stdout);
  char c;
  while (::read(STDIN_FILENO, &c, 1) > 0) {
  }
  return 0;
}

struct Settings {
  std::string socket, model, worker, backend, prompt = "Hello";
  int runs = 20, worker_runs = 5, holders = 4;
  bool verify = true;
};

json measure_attach(const Settings& s) {
  json out;
  // The first attach pays for process-wide set-up (CUDA runtime and context); reported apart.
  {
    const Clock::time_point t = Clock::now();
    hearth::ipc::Client client = connect(s.socket);
    hearth::ImportedModel m = hearth::import_served_model(client, s.model, {.verify = s.verify});
    out["first_attach_ms"] = ms_since(t) - m.timings.verify_ms;
    out["verify_ms"] = m.timings.verify_ms;
    out["verified"] = s.verify;
    out["tensors"] = m.manifest.tensors.size();
    out["tensor_bytes"] = m.manifest.tensor_bytes();
    out["allocation_bytes"] = m.manifest.allocation_bytes();
    out["backend"] = m.manifest.backend;
    out["gpu_uuid"] = m.manifest.gpu_uuid;
  }
  std::vector<double> total, connect_ms, manifest, import, map, release;
  for (int r = 0; r < s.runs; ++r) {
    Clock::time_point t = Clock::now();
    std::optional<hearth::ipc::Client> client(connect(s.socket));
    connect_ms.push_back(ms_since(t));
    std::optional<hearth::ImportedModel> m(hearth::import_served_model(*client, s.model));
    total.push_back(ms_since(t));
    manifest.push_back(m->timings.manifest_ms);
    import.push_back(m->timings.import_ms);
    map.push_back(m->timings.map_ms);
    t = Clock::now();
    m.reset();
    client.reset();
    release.push_back(ms_since(t));
  }
  out["attach_ms"] = summarize(total);
  out["steps_ms"] = {{"connect", summarize(connect_ms)},
                     {"manifest", summarize(manifest)},
                     {"import", summarize(import)},
                     {"map", summarize(map)},
                     {"unmap_and_close", summarize(release)}};
  return out;
}

json measure_first_token(const Settings& s) {
  std::vector<double> first, exit_ms, reported_attach, reported_load, reported_ttft;
  std::map<std::string, std::vector<double>> timeline;  // the worker's own start-up steps
  std::string tokenizer_origin;
  json last;
  for (int r = 0; r < s.worker_runs; ++r) {
    std::vector<std::string> args = {s.worker, "--server", s.socket, "--model",
                                     s.model,  "--prompt", s.prompt, "--max-tokens",
                                     "2",      "--format", "jsonl"};
    if (!s.backend.empty()) args.insert(args.end(), {"--backend", s.backend});
    const Clock::time_point t = Clock::now();
    hearth::ChildProcess worker = start_child(args, /*stdin_pipe=*/false);
    const auto line = worker.stdout_pipe().read_line();
    if (!line) throw std::runtime_error("the worker printed no token (run it by hand to see why)");
    first.push_back(ms_since(t));
    std::string final_line;
    while (auto l = worker.stdout_pipe().read_line()) final_line = *l;
    const hearth::ExitStatus status = finish(worker);
    exit_ms.push_back(ms_since(t));
    if (!status.success()) throw std::runtime_error("the worker failed: " + status.describe());
    const json done = json::parse(final_line, nullptr, false);
    if (done.is_object() && done.contains("timings")) {
      last = done["timings"];
      reported_attach.push_back(last.value("attach_ms", 0.0));
      reported_load.push_back(last.value("load_ms", 0.0));
      reported_ttft.push_back(last.value("ttft_ms", 0.0));
    }
    if (done.is_object() && done.contains("timeline") && done["timeline"].is_object())
      for (const auto& [step, value] : done["timeline"].items()) {
        if (value.is_number()) timeline[step].push_back(value.get<double>());
        if (value.is_string()) tokenizer_origin = value.get<std::string>();
      }
  }
  json steps = json::object();
  for (auto& [step, values] : timeline) steps[step] = summarize(values);
  return {{"start_to_first_token_ms", summarize(first)},
          {"worker_timeline_ms", std::move(steps)},
          {"tokenizer", tokenizer_origin},
          {"start_to_exit_ms", summarize(exit_ms)},
          {"worker_reported",
           {{"attach_ms", summarize(reported_attach)},
            {"load_ms", summarize(reported_load)},
            {"ttft_ms", summarize(reported_ttft)}}},
          {"backend", s.backend.empty() ? "auto" : s.backend}};
}

// Starts `n` holders of one kind and waits until all of them hold.
std::vector<hearth::ChildProcess> start_holders(const Settings& s, int n, bool context_only,
                                                bool touch) {
  std::vector<hearth::ChildProcess> holders;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> args = {self_path(), "--hold",  "--socket",
                                     s.socket,    "--model", s.model};
    if (context_only) args.push_back("--context-only");
    if (touch) args.push_back("--touch");
    holders.push_back(start_child(args, /*stdin_pipe=*/true));
  }
  for (auto& h : holders) {
    const auto line = h.stdout_pipe().read_line();
    if (!line || line->rfind("READY", 0) != 0)
      throw std::runtime_error("a holder process failed to attach");
  }
  return holders;
}

json measure_memory(const Settings& s, const json& attach) {
  const bool vmm = attach["backend"] == "vmm";
  int device = 0;
  if (vmm) device = hearth::vmm_device_for(attach["gpu_uuid"].get<std::string>());
  auto used = [&]() -> json {
    if (vmm) {
      const auto b = device_used_bytes(device);
      return b ? json(*b) : json(nullptr);
    }
    return shmem_bytes();
  };
  json out = {{"measure", vmm ? "device memory used (cudaMemGetInfo, all processes)"
                              : "Shmem (/proc/meminfo)"},
              {"holders", s.holders},
              {"weights_bytes", attach["allocation_bytes"]}};
  out["baseline_bytes"] = used();
  if (vmm) {
    // Holders that only create a CUDA context: what any process on the GPU costs.
    auto contexts = start_holders(s, s.holders, /*context_only=*/true, /*touch=*/false);
    out["with_contexts_only_bytes"] = used();
    for (auto& h : contexts) finish(h);
  }
  // memfd holders read every page, so that shared pages would show if they were copies; on
  // the GPU, mapping is all it takes to use the server's memory.
  auto attached = start_holders(s, s.holders, /*context_only=*/false, /*touch=*/!vmm && s.verify);
  out["with_attached_workers_bytes"] = used();
  for (auto& h : attached) finish(h);
  if (out["baseline_bytes"].is_number() && out["with_attached_workers_bytes"].is_number()) {
    const double base = out["baseline_bytes"].get<double>();
    const double with = out["with_attached_workers_bytes"].get<double>();
    out["per_worker_bytes"] = (with - base) / std::max(1, s.holders);
    if (vmm && out["with_contexts_only_bytes"].is_number())
      out["per_worker_beyond_context_bytes"] =
          (with - out["with_contexts_only_bytes"].get<double>()) / std::max(1, s.holders);
    out["copies_of_weights"] =
        1.0 + (with - base) / std::max(1.0, attach["allocation_bytes"].get<double>());
  }
  return out;
}

void print_table(const json& r) {
  auto ms = [](const json& stat) { return stat.is_object() ? stat["median"].get<double>() : 0.0; };
  std::fprintf(
      stderr, "hearth-attach-bench: model %s, %s backend, %zu tensors, %.2f GB\n",
      r["model"].get<std::string>().c_str(), r["attach"]["backend"].get<std::string>().c_str(),
      r["attach"]["tensors"].get<size_t>(), r["attach"]["tensor_bytes"].get<double>() / 1e9);
  std::fprintf(stderr, "  %-38s %10.2f ms (median of %d; min %.2f)\n",
               "attach (connect+manifest+import+map)", ms(r["attach"]["attach_ms"]),
               r["settings"]["runs"].get<int>(), r["attach"]["attach_ms"]["min"].get<double>());
  for (const char* step : {"connect", "manifest", "import", "map"})
    std::fprintf(stderr, "    %-36s %10.2f ms\n", step, ms(r["attach"]["steps_ms"][step]));
  std::fprintf(stderr, "  %-38s %10.2f ms\n", "first attach (incl. CUDA set-up)",
               r["attach"]["first_attach_ms"].get<double>());
  if (r["attach"]["verified"].get<bool>())
    std::fprintf(stderr, "  %-38s %10.2f ms\n", "verify every checksum",
                 r["attach"]["verify_ms"].get<double>());
  if (r.contains("worker")) {
    std::fprintf(stderr, "  %-38s %10.2f ms (median of %d)\n", "worker start to first token",
                 ms(r["worker"]["start_to_first_token_ms"]),
                 r["settings"]["worker_runs"].get<int>());
    // The worker's own timeline: when each step was done, from its main(), in order.
    std::vector<std::pair<double, std::string>> steps;
    for (const auto& [step, stat] : r["worker"]["worker_timeline_ms"].items())
      steps.emplace_back(ms(stat), step);
    std::sort(steps.begin(), steps.end());
    for (const auto& [at, step] : steps)
      std::fprintf(stderr, "    %-36s %10.2f ms%s\n", ("worker " + step).c_str(), at,
                   step == "tokenizer_ms"
                       ? (" (" + r["worker"]["tokenizer"].get<std::string>() + ")").c_str()
                       : "");
  }
  const json& load = r["server_load"];
  if (load.is_object())
    std::fprintf(stderr, "  %-38s %10.2f GB/s (%.2f s whole load)\n", "server upload (copy)",
                 load["copy_gb_per_s"].get<double>(), load["seconds"].get<double>());
  if (r.contains("memory") && r["memory"].contains("per_worker_bytes"))
    std::fprintf(stderr, "  %-38s %10.1f MB per worker (%d workers; %.3f copies of the weights)\n",
                 "memory with attached workers",
                 r["memory"]["per_worker_bytes"].get<double>() / 1e6,
                 r["memory"]["holders"].get<int>(), r["memory"]["copies_of_weights"].get<double>());
}

int run(int argc, char** argv) {
  CLI::App app{
      "hearth-attach-bench: attach time, worker start to first token, upload throughput and "
      "memory per worker for a model served by a running hearth-server"};
  Settings s;
  bool holder = false, context_only = false, touch = false, no_worker = false;
  std::string json_path;
  app.add_option("--socket", s.socket, "the server's socket")->required();
  app.add_option("--model", s.model, "a model the server serves")->required();
  app.add_option("--runs", s.runs, "attach measurements")->check(CLI::Range(1, 100'000));
  app.add_option("--worker-runs", s.worker_runs, "worker start-to-first-token measurements")
      ->check(CLI::Range(1, 10'000));
  app.add_option("--workers", s.holders, "processes attached at once for the memory measurement")
      ->check(CLI::Range(1, 1024));
  app.add_option("--worker", s.worker,
                 "hearth-worker to start (default: the one beside this tool)");
  app.add_option("--backend", s.backend,
                 "engine for the worker runs (default: where the weights live)");
  app.add_option("--prompt", s.prompt, "prompt for the worker runs");
  app.add_flag("!--no-verify", s.verify, "skip recomputing every tensor's checksum once");
  app.add_flag("--no-worker", no_worker,
               "skip the worker process runs (no engine for this model here)");
  app.add_option("--json", json_path, "also write the JSON result here");
  app.add_flag("--hold", holder, "(internal) attach and hold until stdin closes")->group("");
  app.add_flag("--context-only", context_only, "(internal) with --hold: only create a CUDA context")
      ->group("");
  app.add_flag("--touch", touch, "(internal) with --hold: read every weight once")->group("");
  CLI11_PARSE(app, argc, argv);
  if (holder) return hold(s.socket, s.model, context_only, touch);
  if (s.worker.empty())
    s.worker = (std::filesystem::path(self_path()).parent_path() / "hearth-worker").string();

  json result = {
      {"model", s.model},
      {"socket", s.socket},
      {"settings", {{"runs", s.runs}, {"worker_runs", s.worker_runs}, {"workers", s.holders}}}};
  result["attach"] = measure_attach(s);
  {
    hearth::ipc::Client client = connect(s.socket);
    const json stats = client.call(hearth::ipc::op::kStats).body;
    for (const json& m : stats["models"])
      if (m["name"] == s.model) result["server_load"] = m["load"];
  }
  if (!no_worker && s.worker_runs > 0) result["worker"] = measure_first_token(s);
  if (s.holders > 0) result["memory"] = measure_memory(s, result["attach"]);

  print_table(result);
  std::printf("%s\n", result.dump(2).c_str());
  if (!json_path.empty()) std::ofstream(json_path) << result.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-attach-bench", [&] { return run(argc, argv); });
}
