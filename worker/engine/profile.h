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

// The range of context_length, also a command-line flag, so both say the same (the request
// settings' ranges are in request_settings.h).
inline constexpr int kMaxContextLength = 1 << 20;

struct Profile {
  std::string name;  // free-form label for reports
  RequestSettings request;
  EngineOptions engine;
};

// Applies the keys of `obj` to `profile` (starting from whatever it holds). Throws
// std::runtime_error naming the key on an unknown key, a wrong type or an out-of-range value
// (a request setting's range is request_settings.h's).
void apply_profile_json(Profile& profile, const nlohmann::json& obj, const std::string& label);

// Applies request settings only (one request of a batch): an engine option is an error naming
// it, as is any other key the caller did not take out first (e.g. a request's "id").
void apply_request_json(RequestSettings& request, const nlohmann::json& obj,
                        const std::string& label);

// One `--set key=value` of a command line, as every binary takes it: the value is JSON when it
// parses as JSON, else a string (`--set backend=cpu`). Throws std::runtime_error for text
// without a key and '=', and apply_profile_json's errors labelled "--set".
void apply_profile_setting(Profile& profile, std::string_view setting);

// A profile from JSON text (nested no deeper than kMaxJsonDepth); `label` names it in errors.
Profile parse_profile(std::string_view text, const std::string& label);
Profile load_profile_file(const std::string& path);

// An engine profile for a served worker (hearth-gateway's --profile): engine options and
// "name" only. A request setting is an error naming it, since every request brings its own
// settings and the worker's defaults would never apply (a request-settings file given as an
// engine profile is refused, not silently ignored); unknown keys as apply_profile_json.
Profile parse_engine_profile(std::string_view text, const std::string& label);

nlohmann::json profile_to_json(const Profile& profile);

}  // namespace hearth
