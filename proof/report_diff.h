// `hearth-proof diff`: compares two saved reports of the same suite, prompt by prompt and
// profile by profile (each profile's first run), e.g. before and after a change, served against
// single-process, or 1 against 8 concurrent workers. Exit codes as for `run`: 0 nothing changed,
// 1 some output changed, 2 the reports cannot be compared or hold failed runs.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "proof/contract.h"

namespace hearth::proof {

struct DiffOutcome {
  nlohmann::json json;       // diff.json
  std::string markdown;      // diff.md
  std::string verdict_line;  // one line for stdout
  int exit_code = 0;
};

// Reads a report.json (or the report directory holding one) and checks that it is a report
// this build understands. Throws std::runtime_error naming the file.
nlohmann::json load_report(const std::filesystem::path& path);

// Compares `b` against `a` under `contract`. Reports of different suites (by checksum) or
// without a common profile are an error outcome, not an exception.
DiffOutcome diff_reports(const nlohmann::json& a, const nlohmann::json& b, const Contract& contract,
                         const std::string& a_name, const std::string& b_name);

}  // namespace hearth::proof
