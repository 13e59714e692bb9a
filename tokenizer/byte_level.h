// GPT-2's byte-level alphabet: every byte maps to one printable code point (printable ASCII and
// most of Latin-1 map to themselves, the rest to U+0100 upwards), so any byte string becomes
// text a BPE vocabulary can spell, and back.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace hearth::tok {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();

  // UTF-8 spelling of the code point standing for byte b.
  std::string_view encode(uint8_t b) const { return {utf8_[b].data(), len_[b]}; }
  // Appends the byte-level spelling of every byte of `bytes`.
  void encode_all(std::string_view bytes, std::string& out) const;
  // The byte a code point stands for, or -1 when it is not part of the alphabet.
  int decode(uint32_t cp) const { return cp < kMaxCp ? byte_of_[cp] : -1; }

 private:
  ByteLevelAlphabet();
  static constexpr uint32_t kMaxCp = 0x200;
  std::array<std::array<char, 2>, 256> utf8_{};
  std::array<uint8_t, 256> len_{};
  std::array<int16_t, kMaxCp> byte_of_{};
};

}  // namespace hearth::tok
