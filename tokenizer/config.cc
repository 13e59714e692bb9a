#include "config.h"

#include <cstdio>

#include "utf8.h"

namespace hearth::tok {

void config_error(const std::string& where, const std::string& message) {
  throw std::runtime_error("tokenizer.json: " + where + ": " + message);
}

std::string component_type(const Json& j, const std::string& where) {
  if (!j.is_object()) config_error(where, "expected an object, got " + std::string(j.type_name()));
  const auto it = j.find("type");
  if (it == j.end()) config_error(where, "missing 'type'");
  if (!it->is_string()) config_error(where + ".type", "expected a string");
  return it->get<std::string>();
}

void unsupported_type(const std::string& where, const std::string& type,
                      std::string_view supported) {
  config_error(where,
               "type '" + type + "' is not supported (supported: " + std::string(supported) + ")");
}

const Json& require(const Json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) config_error(where, "expected an object");
  const auto it = obj.find(key);
  if (it == obj.end()) config_error(where, std::string("missing '") + key + "'");
  return *it;
}

std::string get_string(const Json& obj, const char* key, const std::string& where) {
  const Json& v = require(obj, key, where);
  if (!v.is_string()) config_error(where + "." + key, "expected a string");
  return v.get<std::string>();
}

std::string get_optional_string(const Json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return "";
  if (!it->is_string()) config_error(where + "." + key, "expected a string or null");
  return it->get<std::string>();
}

uint32_t get_char(const Json& obj, const char* key, const std::string& where) {
  const std::string s = get_string(obj, key, where);
  size_t len = 0;
  if (s.empty() || !is_valid_utf8(s) || (utf8_decode(s, 0, &len), len != s.size())) {
    config_error(where + "." + key, "expected exactly one character, got " + quote(s));
  }
  return utf8_decode(s, 0, &len);
}

bool get_bool(const Json& obj, const char* key, const std::string& where, bool fallback) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) config_error(where + "." + key, "expected true or false");
  return it->get<bool>();
}

uint64_t get_uint(const Json& obj, const char* key, const std::string& where, uint64_t fallback) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_unsigned()) config_error(where + "." + key, "expected an unsigned integer");
  return it->get<uint64_t>();
}

std::string quote(std::string_view s) {
  std::string out = "'";
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", b);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

}  // namespace hearth::tok
