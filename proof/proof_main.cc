// hearth-proof: runs profiles side by side over a suite of prompts and says whether their tokens
// agree (`run`), or compares two saved reports (`diff`). Exit 0: every contract holds; 1: one is
// violated (or, for diff, some output changed); 2: errors (bad input, failed or hung workers).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "ipc/main_guard.h"
#include "proof/batched_plan.h"
#include "proof/build_info.h"
#include "base/digest.h"
#include "ipc/child_process.h"
#include "ipc/cli_values.h"
#include "proof/machine_info.h"
#include "proof/model_identity.h"
#include "tokenizer/tokenizer_loader.h"
#include "proof/report.h"
#include "proof/report_diff.h"
#include "proof/runner.h"
#include "worker/engine/request_settings.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace hearth::proof;
using hearth::ChildProcess;

struct RunArgs {
  std::vector<std::string> profiles;
  std::string suite, contract = "exact", model, server, out, worker, tokenizer;
  int budget = 0, concurrency = 1, repeat = 1;
  double timeout_s = 600;
  bool quiet = false, batched = false;
};

struct DiffArgs {
  std::string a, b, contract = "exact", out;
};

void on_signal(int) {
  request_stop();
}

Contract parse_contract(const std::string& text) {
  try {
    return Contract::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("--contract: ") + e.what());
  }
}

fs::path self_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(".") : exe.parent_path();
}

// A path as given, else a built-in suite by name ("short" -> proof/suites/short.jsonl).
fs::path resolve_suite(const std::string& arg) {
  if (fs::exists(arg)) return arg;
  if (arg.find('/') == std::string::npos) {
    const fs::path builtin =
        fs::path(HEARTH_PROOF_SUITES_DIR) / (arg.ends_with(".jsonl") ? arg : arg + ".jsonl");
    if (fs::exists(builtin)) return builtin;
  }
  throw std::runtime_error("--suite " + arg +
                           ": no such file (nor a built-in suite of that name in " +
                           std::string(HEARTH_PROOF_SUITES_DIR) + ")");
}

// The worker binary's identity: its path, what --version says and its checksum.
json worker_identity(const fs::path& worker, const fs::path& scratch) {
  json w{{"path", worker.string()}, {"xxh3", hearth::to_hex(hearth::xxh3_128_file(worker))}};
  try {
    ChildProcess child = ChildProcess::spawn(
        ChildProcess::Options({worker.string(), "--version"})
            .stdout_to(ChildProcess::Stream::file(scratch / "worker-version.txt"))
            .stderr_to(ChildProcess::Stream::file(scratch / "worker-version.stderr")));
    const auto status =
        child.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(30));
    std::ifstream in(scratch / "worker-version.txt");
    std::string line;
    std::getline(in, line);
    if (status && status->success()) w["version"] = line;
  } catch (const std::exception&) {
    // no version then; the checksum still identifies the binary
  }
  std::error_code ignored;
  fs::remove(scratch / "worker-version.txt", ignored);
  fs::remove(scratch / "worker-version.stderr", ignored);
  return w;
}

// --out: created if missing; an earlier report there is replaced (its runs/ cleared), anything
// else is refused so a typo cannot make the harness write into an unrelated folder.
void prepare_out_dir(const fs::path& out) {
  std::error_code ec;
  if (fs::exists(out) && !fs::is_directory(out))
    throw std::runtime_error("--out " + out.string() + ": not a directory");
  if (fs::exists(out) && !fs::is_empty(out) && !fs::exists(out / "report.json") &&
      !fs::exists(out / "runs"))
    throw std::runtime_error("--out " + out.string() +
                             ": not empty and holds no hearth-proof report; choose another folder");
  fs::remove_all(out / "runs", ec);
  fs::create_directories(out / "runs", ec);
  if (ec) throw std::runtime_error("--out " + out.string() + ": cannot create: " + ec.message());
}

std::string joined_command(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const bool plain =
        !a.empty() && a.find_first_of(" \t\n'\"\\$`*?[]{}()<>|;&!#~") == std::string::npos;
    if (!plain) {
      std::string q = "'";
      for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      a = q + "'";
    }
    s += (i ? " " : "") + a;
  }
  return s;
}

int run_command(const RunArgs& args, const std::string& command) {
  // Everything is validated before the first worker starts.
  const Contract contract = parse_contract(args.contract);
  if (args.profiles.size() < 2 && args.repeat < 2)
    throw std::runtime_error(
        "nothing to compare: give two or more --profile, or --repeat 2 or more");
  std::vector<fs::path> profile_paths(args.profiles.begin(), args.profiles.end());
  const std::vector<ProofProfile> profiles = load_profiles(profile_paths);
  const Suite suite = load_suite(resolve_suite(args.suite));

  const fs::path worker =
      args.worker.empty() ? self_dir() / "hearth-worker" : fs::path(args.worker);
  if (!fs::is_regular_file(worker) || ::access(worker.c_str(), X_OK) != 0)
    throw std::runtime_error(
        "worker " + worker.string() + ": not an executable file" +
        (args.worker.empty() ? " (build hearth-worker, or give --worker PATH)" : ""));

  ModelIdentity model = args.server.empty() ? identify_model_dir(args.model)
                                            : identify_served_model(args.server, args.model);
  if (!args.tokenizer.empty()) {
    try {
      model.tokenizer = hearth::load_tokenizer_file(args.tokenizer).tokenizer;
    } catch (const std::exception& e) {
      throw std::runtime_error("--tokenizer " + args.tokenizer + ": " + e.what());
    }
  }
  const Detokenizer detokenizer = model.tokenizer ? Detokenizer(*model.tokenizer) : Detokenizer();
  if (contract.kind == Contract::Kind::Text && !model.tokenizer)
    std::fprintf(
        stderr,
        "hearth-proof: warning: no tokenizer for the model; the text contract compares the "
        "text the workers streamed (give --tokenizer to decode the ids instead)\n");

  const fs::path out = args.out;
  prepare_out_dir(out);

  RunnerOptions options;
  options.worker = fs::absolute(worker);
  options.model = {args.server.empty() ? fs::absolute(args.model).string() : args.model,
                   args.server.empty() ? std::nullopt : std::optional<std::string>(args.server)};
  options.concurrency = args.concurrency;
  options.repeat = args.repeat;
  options.batched = args.batched;
  options.timeout = std::chrono::milliseconds(int64_t(args.timeout_s * 1000));
  if (args.budget > 0) options.budget = args.budget;
  options.runs_dir = out / "runs";
  if (!args.quiet)
    options.on_result = [&](const RunResult& r, size_t done, size_t total) {
      const std::string what =
          r.ok() ? "ok, " + std::to_string(r.generation->tokens.size()) + " tokens"
                 : "ERROR: " + r.error;
      std::fprintf(stderr, "[%zu/%zu] %s %s r%d: %s (%.0f ms)\n", done, total,
                   suite.prompts[r.spec.prompt].id.c_str(), profiles[r.spec.profile].label.c_str(),
                   r.spec.repeat, what.c_str(), r.wall_ms);
    };
  if (!args.quiet)
    options.on_worker = [&](size_t index, const std::vector<BatchedWorker>& workers,
                            size_t requests) {
      std::string labels;
      for (size_t p : workers[index].profiles)
        labels += (labels.empty() ? "" : ", ") + profiles[p].label;
      std::fprintf(stderr, "batched worker %zu of %zu: %zu requests, profiles %s", index + 1,
                   workers.size(), requests, labels.c_str());
      if (index > 0)
        std::fprintf(
            stderr, " (its own worker: engine options differ from worker 1's: %s)",
            engine_option_differences(workers[0].engine_options, workers[index].engine_options)
                .c_str());
      std::fprintf(stderr, "\n");
    };

  ReportContext ctx;
  ctx.command = command;
  ctx.cwd = fs::current_path().string();
  ctx.started = utc_now_iso8601();
  ctx.machine = machine_info(out);
  ctx.hearth = {{"version", hearth_version()},
                {"git_commit", build_git_commit()},
                {"worker", worker_identity(options.worker, out)}};
  ctx.model = model.json;
  ctx.suite = &suite;
  ctx.profiles = &profiles;
  ctx.contract = contract;
  ctx.options = &options;
  ctx.detokenizer = &detokenizer;
  ctx.out_dir = out;

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const std::vector<RunResult> results = run_all(suite, profiles, options);
  ctx.finished = utc_now_iso8601();

  const json report = build_report(ctx, results);
  write_report(report, out);
  std::printf("%s\n", verdict_line(report, out).c_str());
  return exit_code(report);
}

int diff_command(const DiffArgs& args) {
  const Contract contract = parse_contract(args.contract);
  const json a = load_report(args.a), b = load_report(args.b);
  const DiffOutcome d = diff_reports(a, b, contract, args.a, args.b);
  if (!args.out.empty()) {
    std::error_code ec;
    fs::create_directories(args.out, ec);
    write_file_atomically(fs::path(args.out) / "diff.json",
                          d.json.dump(1, ' ', false, json::error_handler_t::replace) + "\n");
    write_file_atomically(fs::path(args.out) / "diff.md", d.markdown);
  }
  std::printf("%s\n", d.verdict_line.c_str());
  return d.exit_code;
}

int run(int argc, char** argv) {
  CLI::App app{
      "hearth-proof: run profiles side by side over a suite of prompts and check that their tokens "
      "agree.\n"
      "Exit status: 0 every contract holds, 1 a contract is violated (diff: output changed), 2 "
      "errors."};
  app.set_version_flag("--version",
                       "hearth-proof " + hearth_version() + " (" + build_git_commit() + ")");
  app.require_subcommand(1);

  RunArgs r;
  CLI::App* run_cmd = app.add_subcommand(
      "run", "run every profile over every prompt and compare them against the first");
  run_cmd
      ->add_option("--profile", r.profiles,
                   "worker profile JSON (repeatable; the first is the reference)")
      ->required();
  run_cmd
      ->add_option("--suite", r.suite,
                   "suite JSONL file, or a built-in suite name: short, long, code, multilingual")
      ->required();
  run_cmd
      ->add_option("--budget", r.budget,
                   "generated tokens per prompt at most (overrides profiles' max_tokens)")
      ->check(CLI::Range(1, hearth::kMaxTokensLimit));
  run_cmd->add_option("--contract", r.contract, "exact | text | logprob:EPS (default exact)");
  run_cmd
      ->add_option("--model", r.model, "model directory, or with --server the served model's name")
      ->required();
  run_cmd->add_option("--server", r.server,
                      "hearth-server socket: run served workers on its weights");
  CLI::Option* concurrency =
      run_cmd
          ->add_option("--concurrency", r.concurrency,
                       "workers running at once (default 1); refused with --batched")
          ->check(CLI::Range(1, 1024));
  run_cmd
      ->add_flag("--batched", r.batched,
                 "every run a request of one hearth-worker --requests, all at once (one worker "
                 "per set of engine options; the profiles' max_running bounds how many run "
                 "together); --timeout then bounds each worker")
      ->excludes(concurrency);
  run_cmd
      ->add_option("--repeat", r.repeat,
                   "runs per profile, each checked against the first (default 1)")
      ->check(CLI::Range(1, 1000));
  run_cmd
      ->add_option("--timeout", r.timeout_s,
                   "seconds one worker may take before it is killed (default 600)")
      ->check(CLI::Range(0.001, 7 * 24 * 3600.0))
      ->check(CLI::Validator([](std::string& s) { return hearth::finite_number_error(s); },
                             "SECONDS"));  // Range lets NaN through
  run_cmd->add_option("--out", r.out, "report folder: report.json, report.md, runs/")->required();
  run_cmd->add_option("--worker", r.worker,
                      "hearth-worker binary (default: the one next to hearth-proof)");
  run_cmd->add_option(
      "--tokenizer", r.tokenizer,
      "tokenizer.json (or its folder) for the text contract (default: the model's)");
  run_cmd->add_flag("--quiet", r.quiet, "no progress lines on stderr");

  DiffArgs d;
  CLI::App* diff_cmd = app.add_subcommand(
      "diff", "compare two saved reports of the same suite (e.g. before/after a change)");
  diff_cmd->add_option("REPORT_A", d.a, "report.json or its folder (the reference)")->required();
  diff_cmd->add_option("REPORT_B", d.b, "report.json or its folder")->required();
  diff_cmd->add_option("--contract", d.contract, "exact | text | logprob:EPS (default exact)");
  diff_cmd->add_option("--out", d.out, "also write diff.json and diff.md into this folder");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and a hint
    return kExitError;
  }
  if (*run_cmd) return run_command(r, joined_command(argc, argv));
  return diff_command(d);
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main(
      "hearth-proof", [&] { return run(argc, argv); }, kExitError);
}
