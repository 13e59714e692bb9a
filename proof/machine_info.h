// The machine a proof run ran on, for the report: host, OS, CPU, memory and, where nvidia-smi
// exists, each GPU with its driver. Tokens may legitimately differ between machines (other
// GPUs, other kernels), so a report that does not say where it ran proves little.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

namespace hearth::proof {

// `scratch_dir` receives nvidia-smi's output. Never throws: what cannot be found is left out
// (and an nvidia-smi failure is recorded as such).
nlohmann::json machine_info(const std::filesystem::path& scratch_dir);

// The first executable named `name` in $PATH, or empty.
std::filesystem::path find_in_path(const std::string& name);

}  // namespace hearth::proof
