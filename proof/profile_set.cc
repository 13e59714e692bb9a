#include "proof/profile_set.h"

#include <set>
#include <stdexcept>

#include "base/digest.h"
#include "worker/engine/profile.h"

namespace hearth::proof {

std::vector<ProofProfile> load_profiles(const std::vector<std::filesystem::path>& paths) {
  std::vector<ProofProfile> profiles;
  std::set<std::string> taken;
  for (const std::filesystem::path& path : paths) {
    if (!std::filesystem::is_regular_file(path))
      throw std::runtime_error(path.string() + ": no such profile file");
    const Profile profile = load_profile_file(path.string());  // the worker's own validation
    ProofProfile p;
    p.path = std::filesystem::absolute(path).lexically_normal();
    p.checksum = to_hex(xxh3_128_file(path));
    p.settings = profile_to_json(profile);
    const std::string base = profile.name.empty() ? path.stem().string() : profile.name;
    p.label = base;
    for (int n = 2; !taken.insert(p.label).second; ++n) p.label = base + "#" + std::to_string(n);
    profiles.push_back(std::move(p));
  }
  return profiles;
}

}  // namespace hearth::proof
