// The proof report: everything a reviewer needs to trust (or reproduce) a verdict, as
// report.json (complete: every run's tokens, logprobs and text, every comparison) and
// report.md (a summary table, the divergences and the errors). Also the verdict rules:
// a prompt passes when all its runs succeeded and every comparison holds, fails when a
// contract is violated, and is an error when any of its runs failed.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proof/contract.h"
#include "proof/detokenizer.h"
#include "proof/profile_set.h"
#include "proof/runner.h"
#include "proof/suite.h"

namespace hearth::proof {

inline constexpr const char* kReportFormat = "hearth-proof-report";
inline constexpr int kReportVersion = 1;

// Exit codes of `run` and `diff`.
inline constexpr int kExitHolds = 0;
inline constexpr int kExitViolated = 1;
inline constexpr int kExitError = 2;

// What the run was, besides its results.
struct ReportContext {
  std::string command;            // the command line, for reproduction
  std::string cwd;                // where it ran (the command may name relative paths)
  std::string started, finished;  // UTC, ISO 8601
  nlohmann::json machine, hearth, model;
  const Suite* suite = nullptr;
  const std::vector<ProofProfile>* profiles = nullptr;
  Contract contract;
  const RunnerOptions* options = nullptr;
  const Detokenizer* detokenizer = nullptr;
  std::filesystem::path out_dir;  // run files are named relative to it
};

// The contract a profile's repeated runs are held to: the same tokens and bit-identical
// logprobs, whatever the run's contract (the same settings must give the same numbers).
Contract repeat_contract();

nlohmann::json build_report(const ReportContext& context, const std::vector<RunResult>& results);

int exit_code(const nlohmann::json& report);
// One line for stdout: the verdict, the counts and where the report is.
std::string verdict_line(const nlohmann::json& report, const std::filesystem::path& out_dir);

// Writes report.json and report.md into `out_dir`. Throws std::runtime_error on I/O failure.
void write_report(const nlohmann::json& report, const std::filesystem::path& out_dir);

// report.json's text: indented, one line per prompt.
std::string report_json_text(const nlohmann::json& report);

// report.md from report.json.
std::string render_markdown(const nlohmann::json& report);

// Writes `text` to `path` through a temporary file and a rename, so a reader never sees half a
// report. Throws std::runtime_error naming the path.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

std::string utc_now_iso8601();

}  // namespace hearth::proof
