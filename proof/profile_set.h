// The profiles a proof run compares, loaded and validated with the worker's own profile rules
// before any worker starts, so a typo is an error up front rather than N failed runs. The first
// profile is the reference every other one is compared against.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hearth::proof {

struct ProofProfile {
  // Unique within the run: the profile's "name", else its file's stem; a repeated label gets
  // "#2", "#3", ... so the same file may be given twice (identical profiles must agree).
  std::string label;
  std::filesystem::path path;  // absolute: workers may run in another directory
  std::string checksum;        // xxh3 of the file
  nlohmann::json settings;     // every setting with defaults filled in, as the worker reads them
};

// Throws std::runtime_error naming the file and the key at fault.
std::vector<ProofProfile> load_profiles(const std::vector<std::filesystem::path>& paths);

}  // namespace hearth::proof
