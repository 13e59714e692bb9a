// Well-formed UTF-8, the one definition every layer checks against: the Unicode standard's
// table 3-7, which excludes overlong forms, surrogates and values above U+10FFFF. Text from
// outside (frames, model files, prompts, templates) is checked with these before it is used
// or quoted.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace hearth {

// Length of the well-formed character at the start of `text` (1 to 4), or 0 when `text` is
// empty or does not start with one.
size_t utf8_char_length(std::string_view text);

// The offset of the first byte of `text` that is not part of a well-formed character.
std::optional<size_t> find_invalid_utf8(std::string_view text);

inline bool is_valid_utf8(std::string_view text) {
  return !find_invalid_utf8(text).has_value();
}

// Appends code point `cp` (at most U+10FFFF) encoded as UTF-8.
void append_utf8(std::string& out, char32_t cp);

}  // namespace hearth
