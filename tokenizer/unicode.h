// Unicode character classes and NFC, defined the way the Rust reference (HF `tokenizers`) sees
// them, so hearth makes the same decisions at the same characters.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hearth::tok {

// The White_Space property (Rust char::is_whitespace, regex \s).
bool is_white_space(uint32_t cp);

// Rust's Unicode regex \w: Alphabetic, marks, decimal digits, connector punctuation and the
// joiners; used for the single_word rule of added tokens.
bool is_word_char(uint32_t cp);

// Rust char::is_numeric: general categories Nd, Nl and No.
bool is_numeric(uint32_t cp);

// Canonical composition (NFC) of valid UTF-8 text.
std::string nfc(std::string_view text);

}  // namespace hearth::tok
