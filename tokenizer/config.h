// Reading tokenizer.json fields with errors that name the exact JSON location, e.g.
// "tokenizer.json: pre_tokenizer.pretokenizers[1]: type 'Whitespace' is not supported".
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hearth::tok {

using Json = nlohmann::json;

[[noreturn]] void config_error(const std::string& where, const std::string& message);

// The `type` of a component; also checks that it is an object.
std::string component_type(const Json& j, const std::string& where);

// Refuses a component type outside the supported list, naming both.
[[noreturn]] void unsupported_type(const std::string& where, const std::string& type,
                                   std::string_view supported);

const Json& require(const Json& obj, const char* key, const std::string& where);
std::string get_string(const Json& obj, const char* key, const std::string& where);
// "" when the key is absent or null.
std::string get_optional_string(const Json& obj, const char* key, const std::string& where);
// A field that must hold exactly one character (Metaspace replacement, Strip content).
uint32_t get_char(const Json& obj, const char* key, const std::string& where);
bool get_bool(const Json& obj, const char* key, const std::string& where, bool fallback);
uint64_t get_uint(const Json& obj, const char* key, const std::string& where, uint64_t fallback);

// Quotes a token for an error message, escaping control characters.
std::string quote(std::string_view s);

}  // namespace hearth::tok
