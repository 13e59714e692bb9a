#include "proof/batched_runner.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <map>
#include <stdexcept>

#include "proof/batched_plan.h"
#include "proof/report.h"
#include "proof/worker_wait.h"
#include "base/read_file.h"

namespace hearth::proof {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// One request line: the run's name as its id, the prompt, and every request setting of its
// profile, spelled out so the worker's own defaults never matter; the token limit overrides the
// profile's max_tokens as `--max-tokens` does for an alone run.
json request_json(const RunFiles& files, const SuitePrompt& prompt, const ProofProfile& profile,
                  std::optional<int> token_limit) {
  json request = split_profile(profile.settings).request;
  request["id"] = files.name();
  if (prompt.text)
    request["prompt"] = *prompt.text;
  else
    request["prompt_tokens"] = prompt.tokens;
  if (token_limit) request["max_tokens"] = *token_limit;
  return request;
}

// Why a batched worker's results cannot be trusted, or empty when they can: it was killed, it
// failed (a worker running --requests exits 0 even when requests fail, so anything else is a
// crash) or its stream could not be read to the end.
std::string worker_failure(const WaitOutcome& waited, const std::string& stderr_text,
                           const std::string& stream_error) {
  if (!waited.error.empty()) return "batched worker " + waited.error;
  if (!waited.exit.success()) {
    const std::string why = failure_line(stderr_text);
    return "batched worker " + waited.exit.describe() + (why.empty() ? "" : ": " + why);
  }
  return stream_error;
}

class WorkerRun {
 public:
  WorkerRun(size_t number, const BatchedWorker& plan, const std::vector<size_t>& spec_indices,
            const std::vector<RunSpec>& specs, const Suite& suite,
            const std::vector<ProofProfile>& profiles, const RunnerOptions& options)
      : plan_(plan),
        spec_indices_(spec_indices),
        specs_(specs),
        suite_(suite),
        profiles_(profiles),
        options_(options),
        dir_(options.runs_dir / ("batched-worker-" + std::to_string(number))) {}

  // Fills results[i] for every i in spec_indices.
  void run(std::vector<RunResult>& results) {
    for (size_t i : spec_indices_) {
      RunResult& r = results[i];
      r.spec = specs_[i];
      const RunFiles files = run_files(options_.runs_dir, r.spec, suite_, profiles_);
      r.stdout_path = files.stdout_path();
      r.stderr_path = dir_ / "stderr";
      ids_[files.name()] = i;
    }
    if (stop_requested()) return fail_all(results, "not run: the proof run was interrupted");

    const auto start = std::chrono::steady_clock::now();
    std::optional<WaitOutcome> waited;
    std::string start_error;
    try {
      write_inputs(results);
      ChildProcess child = ChildProcess::spawn(
          ChildProcess::Options(batched_worker_command(options_.worker, options_.model,
                                                       dir_ / "profile.json",
                                                       dir_ / "requests.jsonl"))
              .stdout_to(ChildProcess::Stream::file(dir_ / "events.jsonl"))
              .stderr_to(ChildProcess::Stream::file(dir_ / "stderr")));
      waited = wait_for_worker(child, start, options_.timeout);
    } catch (const std::exception& e) {
      start_error = e.what();  // could not start it: bad --worker path, out of processes, ...
    }
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    for (size_t i : spec_indices_) {
      results[i].wall_ms = wall_ms;  // the worker's: its requests ran together
      if (waited) results[i].exit = waited->exit;
    }
    if (!waited) return fail_all(results, start_error);
    split_events(results, *waited);
  }

 private:
  void write_inputs(const std::vector<RunResult>& results) {
    fs::create_directories(dir_);
    json profile = plan_.engine_options;
    profile["name"] = dir_.filename().string();
    write_file_atomically(dir_ / "profile.json", profile.dump(2) + "\n");
    std::string lines;
    for (size_t i : spec_indices_) {
      const RunSpec& spec = results[i].spec;
      const SuitePrompt& prompt = suite_.prompts[spec.prompt];
      lines += request_json(run_files(options_.runs_dir, spec, suite_, profiles_), prompt,
                            profiles_[spec.profile], token_limit(prompt, options_.budget))
                   .dump(-1, ' ', false, json::error_handler_t::strict) +
               "\n";
    }
    write_file_atomically(dir_ / "requests.jsonl", lines);
  }

  void split_events(std::vector<RunResult>& results, const WaitOutcome& waited) {
    const std::string stderr_text = read_file(dir_ / "stderr");
    BatchedStream stream = split_batched_worker_output(read_file(dir_ / "events.jsonl"));
    for (const auto& [id, _] : stream.events)
      if (!ids_.contains(id) && stream.error.empty())
        stream.error = "worker output names request '" + id + "', which was never sent";
    // A failed worker fails every request, finished or not: a crash must never pass unseen.
    const std::string failure = worker_failure(waited, stderr_text, stream.error);
    for (const auto& [id, i] : ids_) {
      RunResult& r = results[i];
      fs::create_directories(r.stdout_path.parent_path());
      write_file_atomically(r.stdout_path, stream.events[id]);  // kept, even when it failed
      const bool finished = stream.finished.contains(id);
      if (!failure.empty()) {
        r.error = failure +
                  (finished ? " (after this request finished)" : " (before this request finished)");
      } else if (!finished) {
        r.error = "the batched worker exited without finishing this request";
      } else {
        try {
          Generation g = parse_worker_output(stream.events[id]);
          if (g.stop == "error")
            r.error = "the worker failed the request: " + g.error;
          else
            r.generation = std::move(g);
        } catch (const std::exception& e) {
          r.error = e.what();
        }
      }
      if (!r.ok()) r.stderr_tail = stderr_tail(stderr_text);
    }
  }

  void fail_all(std::vector<RunResult>& results, const std::string& why) {
    for (size_t i : spec_indices_) results[i].error = why;
  }

  const BatchedWorker& plan_;
  const std::vector<size_t>& spec_indices_;
  const std::vector<RunSpec>& specs_;
  const Suite& suite_;
  const std::vector<ProofProfile>& profiles_;
  const RunnerOptions& options_;
  const fs::path dir_;
  std::map<std::string, size_t> ids_;  // request id -> index into the results
};

}  // namespace

std::vector<RunResult> run_batched(const std::vector<RunSpec>& specs, const Suite& suite,
                                   const std::vector<ProofProfile>& profiles,
                                   const RunnerOptions& options) {
  const std::vector<BatchedWorker> workers = plan_batched_workers(profiles);
  std::vector<RunResult> results(specs.size());
  size_t done = 0;
  for (size_t w = 0; w < workers.size(); ++w) {
    std::vector<size_t> mine;
    for (size_t i = 0; i < specs.size(); ++i)
      if (std::find(workers[w].profiles.begin(), workers[w].profiles.end(), specs[i].profile) !=
          workers[w].profiles.end())
        mine.push_back(i);
    if (options.on_worker) options.on_worker(w, workers, mine.size());
    WorkerRun(w + 1, workers[w], mine, specs, suite, profiles, options).run(results);
    for (size_t i : mine)
      if (options.on_result) options.on_result(results[i], ++done, specs.size());
  }
  return results;
}

}  // namespace hearth::proof
