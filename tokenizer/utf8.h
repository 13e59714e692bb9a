// UTF-8 helpers for the tokenizer: decoding code points and repair of ill-formed input by
// U+FFFD substitution (whole and incremental, so streaming and batch decode agree). Validation
// and encoding are the project's one definition, base/utf8.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/utf8.h"

namespace hearth::tok {

inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Length of the character starting with `lead`, for text already known to be valid UTF-8.
inline size_t utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point at s[i] of valid UTF-8 text and stores its byte length in *len.
inline uint32_t utf8_decode(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  auto cont = [&](size_t k) { return static_cast<unsigned char>(s[i + k]) & 0x3Fu; };
  if (b0 < 0xE0) {
    *len = 2;
    return ((b0 & 0x1Fu) << 6) | cont(1);
  }
  if (b0 < 0xF0) {
    *len = 3;
    return ((b0 & 0x0Fu) << 12) | (cont(1) << 6) | cont(2);
  }
  *len = 4;
  return ((b0 & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

// Replaces each maximal ill-formed subsequence by one U+FFFD, the Unicode "best practice" that
// Python's errors="replace" and Rust's String::from_utf8_lossy both follow. Valid input comes
// back unchanged.
std::string repair_utf8(std::string_view s);

// Incremental repair_utf8: bytes arrive in pieces, complete characters leave at once, and an
// incomplete trailing sequence waits for the next piece. push(a) + push(b) + finish() produces
// exactly repair_utf8(a + b).
class Utf8Repairer {
 public:
  void push(std::string_view bytes, std::string& out);
  // Flushes a dangling incomplete sequence as one U+FFFD.
  void finish(std::string& out);

 private:
  unsigned char pending_[4] = {};
  size_t pending_len_ = 0;
};

}  // namespace hearth::tok
