#include "base/key_value_setting.h"

namespace hearth {

std::optional<KeyValueSetting> parse_key_value_setting(std::string_view setting) {
  const size_t eq = setting.find('=');
  if (eq == std::string_view::npos || eq == 0) return std::nullopt;
  const std::string_view raw = setting.substr(eq + 1);
  nlohmann::json value = nlohmann::json::parse(raw, nullptr, false);
  if (value.is_discarded()) value = std::string(raw);
  return KeyValueSetting{std::string(setting.substr(0, eq)), std::move(value)};
}

}  // namespace hearth
