#include "proof/batched_plan.h"

#include <algorithm>

#include "worker/engine/profile.h"

namespace hearth::proof {

using json = nlohmann::json;

ProfileParts split_profile(const json& settings) {
  ProfileParts parts{json::object(), json::object()};
  for (const auto& [key, value] : settings.items()) {
    if (key == "name") continue;  // a label, neither kind
    RequestSettings scratch;
    bool is_request = true;
    try {
      apply_request_json(scratch, json{{key, value}}, "profile");
    } catch (const std::runtime_error&) {
      is_request = false;  // the value came from a valid profile: only the kind can be refused
    }
    (is_request ? parts.request : parts.engine)[key] = value;
  }
  return parts;
}

std::vector<BatchedWorker> plan_batched_workers(const std::vector<ProofProfile>& profiles) {
  std::vector<BatchedWorker> workers;
  for (size_t i = 0; i < profiles.size(); ++i) {
    const json engine = split_profile(profiles[i].settings).engine;
    auto same = std::find_if(workers.begin(), workers.end(),
                             [&](const BatchedWorker& w) { return w.engine_options == engine; });
    if (same == workers.end()) same = workers.insert(workers.end(), BatchedWorker{{}, engine});
    same->profiles.push_back(i);
  }
  return workers;
}

std::string engine_option_differences(const json& a, const json& b) {
  std::string out;
  auto add = [&](const std::string& key, const json& va, const json& vb) {
    out += (out.empty() ? "" : ", ") + key + " " + va.dump() + " -> " + vb.dump();
  };
  for (const auto& [key, value] : b.items())
    if (!a.contains(key) || a[key] != value) add(key, a.contains(key) ? a[key] : json(), value);
  for (const auto& [key, value] : a.items())
    if (!b.contains(key)) add(key, value, json());
  return out;
}

json batched_workers_json(const std::vector<BatchedWorker>& workers,
                          const std::vector<ProofProfile>& profiles) {
  json out = json::array();
  for (const BatchedWorker& w : workers) {
    json labels = json::array();
    for (size_t p : w.profiles) labels.push_back(profiles[p].label);
    out.push_back({{"profiles", labels}, {"engine_options", w.engine_options}});
  }
  return out;
}

}  // namespace hearth::proof
