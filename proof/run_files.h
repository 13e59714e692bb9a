// Where one run's output lives: OUT/runs/NNN-<prompt>/PP-<profile>.rR.{jsonl,stderr}. Alone and
// batched runs use the same names, so a report reads the same whichever way it was produced.
#pragma once

#include <filesystem>
#include <string>

#include "proof/profile_set.h"
#include "proof/suite.h"

namespace hearth::proof {

struct RunSpec {
  size_t prompt = 0;   // index into the suite
  size_t profile = 0;  // index into the profiles
  int repeat = 0;      // 0 .. repeat-1
};

struct RunFiles {
  std::filesystem::path dir;  // the prompt's folder
  std::string stem;           // "PP-<profile>.rR"
  // "NNN-<prompt>/PP-<profile>.rR": unique per run; a batched run's request id.
  std::string name() const { return dir.filename().string() + "/" + stem; }
  std::filesystem::path stdout_path() const { return dir / (stem + ".jsonl"); }
  std::filesystem::path stderr_path() const { return dir / (stem + ".stderr"); }
};

RunFiles run_files(const std::filesystem::path& runs_dir, const RunSpec& spec, const Suite& suite,
                   const std::vector<ProofProfile>& profiles);

}  // namespace hearth::proof
