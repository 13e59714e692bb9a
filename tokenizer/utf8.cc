#include "utf8.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>

namespace hearth::tok {
namespace {

// Allowed range of the second byte after a lead byte (Unicode Table 3-7); later continuation
// bytes are always 80..BF. Tightening the second byte rejects overlongs and surrogates.
struct LeadInfo {
  uint8_t length;  // 0: not a lead byte
  uint8_t lo, hi;
};

constexpr LeadInfo lead_info_of(unsigned b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

constexpr std::array<LeadInfo, 256> kLeadInfo = [] {
  std::array<LeadInfo, 256> table{};
  for (unsigned b = 0; b < 256; ++b) table[b] = lead_info_of(b);
  return table;
}();

LeadInfo lead_info(unsigned char b) {
  return kLeadInfo[b];
}

// Appends the repaired form of p[0, n) to out and returns how many bytes were consumed. When
// `final` is false, an incomplete but so-far valid sequence at the end is left unconsumed.
size_t repair(const unsigned char* p, size_t n, bool final, std::string& out) {
  size_t i = 0;
  while (i < n) {
    const size_t run_start = i;
    while (i < n && p[i] < 0x80) ++i;
    out.append(reinterpret_cast<const char*>(p + run_start), i - run_start);
    if (i == n) break;
    const LeadInfo info = lead_info(p[i]);
    if (info.length == 0) {
      out.append(kReplacementUtf8);
      ++i;
      continue;
    }
    size_t k = 1;  // bytes of the sequence that are valid so far
    while (k < info.length && i + k < n) {
      const unsigned char c = p[i + k];
      const bool ok = k == 1 ? (c >= info.lo && c <= info.hi) : (c >= 0x80 && c <= 0xBF);
      if (!ok) break;
      ++k;
    }
    if (k == info.length) {
      out.append(reinterpret_cast<const char*>(p + i), k);
      i += k;
    } else if (i + k == n && !final) {
      return i;  // wait for more bytes
    } else {
      out.append(kReplacementUtf8);  // the maximal valid prefix becomes one U+FFFD
      i += k;
    }
  }
  return n;
}

}  // namespace

std::string repair_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  repair(reinterpret_cast<const unsigned char*>(s.data()), s.size(), true, out);
  return out;
}

void Utf8Repairer::push(std::string_view bytes, std::string& out) {
  if (pending_len_ == 0) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    const size_t used = repair(p, bytes.size(), false, out);
    // What repair() leaves is the start of one incomplete sequence: shorter than the buffer.
    // Said here so the compiler (and the reader) need not trust it.
    const size_t held = bytes.size() - used;
    if (held >= sizeof pending_) throw std::logic_error("utf8: held more than one sequence");
    pending_len_ = held;
    std::copy_n(p + used, held, pending_);
    return;
  }
  // Rare path: finish the held sequence with the new bytes in front of us.
  std::string joined(reinterpret_cast<const char*>(pending_), pending_len_);
  joined.append(bytes);
  pending_len_ = 0;
  push(joined, out);
}

void Utf8Repairer::finish(std::string& out) {
  if (pending_len_ > 0) repair(pending_, pending_len_, true, out);
  pending_len_ = 0;
}

}  // namespace hearth::tok
