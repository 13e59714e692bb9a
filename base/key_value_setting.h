// A `--set KEY=VALUE` of a command line, as every binary takes it (engine profiles,
// hearth-synth's config keys): split at the first '=', the value JSON where it parses as JSON
// (2, true, [1, 2]), else the text itself as a string (`backend=cpu`, `cache_salt=`: "").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hearth {

struct KeyValueSetting {
  std::string key;
  nlohmann::json value;
};

// nullopt for text without '=' or with an empty key; each caller words its own error.
std::optional<KeyValueSetting> parse_key_value_setting(std::string_view setting);

}  // namespace hearth
