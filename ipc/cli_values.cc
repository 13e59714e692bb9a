#include "ipc/cli_values.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace hearth {

std::optional<uint64_t> parse_unsigned(std::string_view text, uint64_t max) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = uint64_t(c - '0');
    if (value > (max - digit) / 10) return std::nullopt;  // value * 10 + digit > max
    value = value * 10 + digit;
  }
  return value;
}

std::string finite_number_error(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) return "'" + text + "' is not a number";
  if (!std::isfinite(value) || errno == ERANGE) return "'" + text + "' is not a finite number";
  return {};
}

std::string integer_range_error(std::string_view text, int64_t lo, int64_t hi) {
  const bool negative = text.starts_with('-');
  // The magnitude is read exactly (never wrapped or saturated); 128 bits hold its negation.
  const std::optional<uint64_t> magnitude = parse_unsigned(text.substr(negative ? 1 : 0));
  if (magnitude) {
    const __int128 value = negative ? -static_cast<__int128>(*magnitude) : *magnitude;
    if (value >= lo && value <= hi) return {};
  }
  return "'" + std::string(text) + "' is not an integer from " + std::to_string(lo) + " to " +
         std::to_string(hi);
}

std::optional<std::chrono::milliseconds> parse_seconds(const std::string& text,
                                                       double max_seconds) {
  // Decimal only: strtod also reads hexadecimal ("0x10p0").
  if (text.find_first_not_of("0123456789.eE+-") != std::string::npos) return std::nullopt;
  if (!finite_number_error(text).empty()) return std::nullopt;
  const double seconds = std::strtod(text.c_str(), nullptr);
  if (!(seconds >= 0 && seconds <= max_seconds)) return std::nullopt;
  const double ms = std::round(seconds * 1000);
  if (seconds > 0 && ms < 1) return std::nullopt;
  return std::chrono::milliseconds(int64_t(ms));
}

std::vector<int32_t> parse_token_list(std::string_view text, std::string_view flag) {
  const std::string where(flag);
  std::vector<int32_t> ids;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::optional<uint64_t> id = parse_unsigned(item, INT32_MAX);
    if (!id) {
      if (item.empty())
        throw std::runtime_error(where + ": '" + std::string(text) +
                                 "' has an empty item (token ids are separated by single commas)");
      throw std::runtime_error(where + ": '" + std::string(item) +
                               "' is not a token id (0 to 2147483647)");
    }
    ids.push_back(int32_t(*id));
    if (comma == std::string_view::npos) return ids;
    start = comma + 1;
  }
}

}  // namespace hearth
