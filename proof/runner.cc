#include "proof/runner.h"

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "proof/batched_runner.h"
#include "proof/run_files.h"
#include "proof/worker_wait.h"
#include "base/read_file.h"

namespace hearth::proof {

namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "request_stop must be async-signal-safe");

RunResult run_one(const RunSpec& spec, const Suite& suite,
                  const std::vector<ProofProfile>& profiles, const RunnerOptions& options) {
  RunResult r;
  r.spec = spec;
  const SuitePrompt& prompt = suite.prompts[spec.prompt];
  const RunFiles files = run_files(options.runs_dir, spec, suite, profiles);
  r.stdout_path = files.stdout_path();
  r.stderr_path = files.stderr_path();
  if (stop_requested()) {
    r.error = "not run: the proof run was interrupted";
    return r;
  }

  const auto start = std::chrono::steady_clock::now();
  try {
    std::filesystem::create_directories(files.dir);
    ChildProcess child = ChildProcess::spawn(
        ChildProcess::Options(worker_command(options.worker, options.model, profiles[spec.profile],
                                             prompt, token_limit(prompt, options.budget)))
            .stdout_to(ChildProcess::Stream::file(r.stdout_path))
            .stderr_to(ChildProcess::Stream::file(r.stderr_path)));
    WaitOutcome waited = wait_for_worker(child, start, options.timeout);
    r.exit = waited.exit;
    r.error = std::move(waited.error);
  } catch (const std::exception& e) {
    r.error = e.what();  // could not start it: bad --worker path, out of processes, ...
  }
  r.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!r.exit) return r;

  const std::string err = read_file(r.stderr_path);
  r.stderr_tail = stderr_tail(err);
  if (!r.error.empty()) return r;
  if (!r.exit->success()) {
    const std::string why = failure_line(err);
    r.error = "worker " + r.exit->describe() + (why.empty() ? "" : ": " + why);
    return r;
  }
  try {
    r.generation = parse_worker_output(read_file(r.stdout_path));
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

}  // namespace

std::vector<RunSpec> all_runs(const Suite& suite, const std::vector<ProofProfile>& profiles,
                              int repeat) {
  std::vector<RunSpec> specs;
  for (size_t p = 0; p < suite.prompts.size(); ++p)
    for (size_t f = 0; f < profiles.size(); ++f)
      for (int k = 0; k < repeat; ++k) specs.push_back({p, f, k});
  return specs;
}

void request_stop() noexcept {
  g_stop.store(true);
}
bool stop_requested() noexcept {
  return g_stop.load();
}

std::vector<RunResult> run_all(const Suite& suite, const std::vector<ProofProfile>& profiles,
                               const RunnerOptions& options) {
  if (options.concurrency < 1) throw std::invalid_argument("concurrency must be at least 1");
  if (options.repeat < 1) throw std::invalid_argument("repeat must be at least 1");
  const std::vector<RunSpec> specs = all_runs(suite, profiles, options.repeat);
  if (options.batched) return run_batched(specs, suite, profiles, options);

  std::vector<RunResult> results(specs.size());
  std::atomic<size_t> next{0};
  std::mutex progress;
  size_t done = 0;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < specs.size();) {
      results[i] = run_one(specs[i], suite, profiles, options);
      std::lock_guard lock(progress);
      ++done;
      if (options.on_result) options.on_result(results[i], done, specs.size());
    }
  };
  {
    std::vector<std::jthread> threads;
    const size_t n = std::min(specs.size(), size_t(options.concurrency));
    for (size_t t = 0; t < n; ++t) threads.emplace_back(work);
  }  // joined here
  return results;
}

}  // namespace hearth::proof
