// A profile: a worker's engine options and its default request settings, read from one flat
// JSON object (a file may hold both kinds of key). An unknown key is an error, so a typo never
// silently falls back to a default. Command-line flags override profile values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/engine/engine_options.h"
#include "worker/engine/request_settings.h"

namespace hearth {

// The ranges of the integer keys that are also command-line flags, so both say the same.
inline constexpr int kMaxTokensLimit = 1 << 24;    // max_tokens
inline constexpr int kMaxTopK = 1 << 30;           // top_k
inline constexpr int kMaxContextLength = 1 << 20;  // context_length

struct Profile {
  std::string name;  // free-form label for reports
  RequestSettings request;
  EngineOptions engine;
};

// Applies the keys of `obj` to `profile` (starting from whatever it holds). Throws
// std::runtime_error naming the key on an unknown key, a wrong type or an out-of-range value.
void apply_profile_json(Profile& profile, const nlohmann::json& obj, const std::string& label);

// Applies request settings only (one request of a batch): an engine option is an error naming
// it, as is any other key the caller did not take out first (e.g. a request's "id").
void apply_request_json(RequestSettings& request, const nlohmann::json& obj,
                        const std::string& label);

// A profile from JSON text (nested no deeper than kMaxJsonDepth); `label` names it in errors.
Profile parse_profile(std::string_view text, const std::string& label);
Profile load_profile_file(const std::string& path);

nlohmann::json profile_to_json(const Profile& profile);

}  // namespace hearth
