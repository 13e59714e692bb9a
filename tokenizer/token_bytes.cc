// Tokenizer::token_bytes: a token's raw bytes, for byte-level grammars.
#include <string>

#include "byte_level.h"
#include "tokenizer.h"
#include "tokenizer_impl.h"
#include "utf8.h"

namespace hearth {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// "<0xAB>": the byte-fallback spelling of one byte.
std::optional<uint8_t> fallback_byte(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return uint8_t(hi * 16 + lo);
}

// The bytes a GPT-2 byte-level spelling stands for, if every character is in its alphabet.
std::optional<std::string> byte_level(std::string_view spelling) {
  const tok::ByteLevelAlphabet& a = tok::ByteLevelAlphabet::get();
  std::string out;
  for (size_t i = 0; i < spelling.size();) {
    size_t len = 0;
    const int b = a.decode(tok::utf8_decode(spelling, i, &len));
    if (b < 0 || len == 0) return std::nullopt;
    out.push_back(char(b));
    i += len;
  }
  return out;
}

}  // namespace

std::string Tokenizer::token_bytes(int32_t id) const {
  const std::optional<std::string_view> token = impl_->token_of(id);
  if (!token || impl_->is_special_content(*token)) return {};
  // The decoder's text of the token alone is right unless the token is part of a character
  // (the decoder then repairs it to U+FFFD): those are byte-level or byte-fallback tokens.
  std::string text(*token);
  if (const tok::Decoder* d = impl_->decoder()) {
    std::vector<std::string> one{text};
    d->decode_chain(one);
    text.clear();
    for (const std::string& s : one) text += s;
  }
  if (text.find(kReplacement) == std::string::npos ||
      token->find(kReplacement) != std::string::npos)
    return text;
  if (const auto b = fallback_byte(*token)) return std::string(1, char(*b));
  if (auto bytes = byte_level(*token)) return *bytes;
  return text;
}

}  // namespace hearth
