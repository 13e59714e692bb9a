#include "proof/runner.h"
#include "weight-server/model/read_file.h"

#include <atomic>
#include <cctype>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace hearth::proof {

namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "request_stop must be async-signal-safe");

// How often a waiting runner looks at the stop flag.
constexpr auto kStopPoll = std::chrono::milliseconds(100);
constexpr size_t kStderrTailBytes = 4096;

std::string tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(s.size() - n);
}

// The last non-empty line of a worker's stderr: usually "hearth-worker: error: ...".
std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\r\n \t");
  if (end == std::string::npos) return {};
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// A file-name-safe version of a prompt id or profile label.
std::string safe_name(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 64))
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return out;
}

std::string zero_pad(size_t n, size_t width) {
  std::string s = std::to_string(n);
  return std::string(width > s.size() ? width - s.size() : 0, '0') + s;
}

RunResult run_one(const RunSpec& spec, const Suite& suite,
                  const std::vector<ProofProfile>& profiles, const RunnerOptions& options) {
  RunResult r;
  r.spec = spec;
  const SuitePrompt& prompt = suite.prompts[spec.prompt];
  const ProofProfile& profile = profiles[spec.profile];
  const std::filesystem::path dir =
      options.runs_dir / (zero_pad(spec.prompt, 3) + "-" + safe_name(prompt.id));
  const std::string stem = zero_pad(spec.profile, 2) + "-" + safe_name(profile.label) + ".r" +
                           std::to_string(spec.repeat);
  r.stdout_path = dir / (stem + ".jsonl");
  r.stderr_path = dir / (stem + ".stderr");
  if (stop_requested()) {
    r.error = "not run: the proof run was interrupted";
    return r;
  }

  const auto start = std::chrono::steady_clock::now();
  try {
    std::filesystem::create_directories(dir);
    ChildProcess child = ChildProcess::spawn(
        ChildProcess::Options(worker_command(options.worker, options.model, profile, prompt,
                                             token_limit(prompt, options.budget)))
            .stdout_to(ChildProcess::Stream::file(r.stdout_path))
            .stderr_to(ChildProcess::Stream::file(r.stderr_path)));
    const auto deadline = start + options.timeout;
    while (!r.exit) {
      if (stop_requested()) {
        child.kill_group();
        r.exit = child.wait_until(std::chrono::steady_clock::time_point::max());
        r.error = "interrupted: the worker was killed";
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        child.kill_group();
        r.exit = child.wait_until(std::chrono::steady_clock::time_point::max());
        const auto ms = options.timeout.count();
        r.error = "timed out after " +
                  (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms") +
                  "; the worker was killed";
        break;
      }
      r.exit = child.wait_until(std::min(deadline, now + kStopPoll));
    }
  } catch (const std::exception& e) {
    r.error = e.what();  // could not start it: bad --worker path, out of processes, ...
  }
  r.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!r.exit) return r;

  const std::string err = read_file(r.stderr_path);
  r.stderr_tail = tail(err, kStderrTailBytes);
  if (!r.error.empty()) return r;
  if (!r.exit->success()) {
    const std::string why = last_line(err);
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
  std::vector<RunSpec> specs;
  for (size_t p = 0; p < suite.prompts.size(); ++p)
    for (size_t f = 0; f < profiles.size(); ++f)
      for (int k = 0; k < options.repeat; ++k) specs.push_back({p, f, k});

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
