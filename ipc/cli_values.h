// Strict readers for command-line values, for every binary's flags: a value either reads
// exactly as written or is refused with a message that quotes it. Nothing wraps, saturates,
// rounds or drops a trailing separator. (CLI11 alone takes "-1" for an unsigned flag as
// 2^64-1, and "nan" for any floating-point one.)
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hearth {

// Decimal digits only (no sign, space or exponent), at most `max`; nullopt otherwise.
std::optional<uint64_t> parse_unsigned(std::string_view text, uint64_t max = UINT64_MAX);

// Empty when `text` is a finite decimal number; otherwise why it is not ("'nan' is not a
// finite number").
std::string finite_number_error(const std::string& text);

// Empty when `text` is a decimal integer (an optional '-', then digits) from `lo` to `hi`;
// otherwise "'TEXT' is not an integer from LO to HI", for a flag's check (cli_checks.h), which
// CLI11 prefixes with the flag's name.
std::string integer_range_error(std::string_view text, int64_t lo, int64_t hi);

// A duration in seconds, a finite decimal number from 0 to `max_seconds`, in whole
// milliseconds; nullopt otherwise, a positive value under 1 ms included (it would read as 0,
// which flags like --idle-exit take as "never").
std::optional<std::chrono::milliseconds> parse_seconds(const std::string& text, double max_seconds);

// "1,2,3": token ids from 0 to INT32_MAX. Throws std::runtime_error naming `flag` and the
// offending item for anything else, an empty item ("5,", "1,,2") or an empty list included.
std::vector<int32_t> parse_token_list(std::string_view text, std::string_view flag);

}  // namespace hearth
