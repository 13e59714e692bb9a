#include "byte_level.h"

#include "utf8.h"

namespace hearth::tok {

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_.fill(-1);
  // Bytes that are visible characters keep their own code point; the others (controls,
  // space, DEL, NBSP, soft hyphen...) take 256, 257, ... in byte order.
  auto visible = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = visible(b) ? static_cast<uint32_t>(b) : next++;
    std::string s;
    append_utf8(s, cp);
    len_[b] = static_cast<uint8_t>(s.size());
    for (size_t k = 0; k < s.size(); ++k) utf8_[b][k] = s[k];
    byte_of_[cp] = static_cast<int16_t>(b);
  }
}

void ByteLevelAlphabet::encode_all(std::string_view bytes, std::string& out) const {
  for (const char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    out.append(utf8_[b].data(), len_[b]);
  }
}

}  // namespace hearth::tok
