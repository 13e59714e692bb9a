#include "proof/run_files.h"

#include <cctype>

namespace hearth::proof {

namespace {

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

}  // namespace

RunFiles run_files(const std::filesystem::path& runs_dir, const RunSpec& spec, const Suite& suite,
                   const std::vector<ProofProfile>& profiles) {
  return {runs_dir / (zero_pad(spec.prompt, 3) + "-" + safe_name(suite.prompts[spec.prompt].id)),
          zero_pad(spec.profile, 2) + "-" + safe_name(profiles[spec.profile].label) + ".r" +
              std::to_string(spec.repeat)};
}

}  // namespace hearth::proof
