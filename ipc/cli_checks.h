// CLI11 checks built on cli_values.h, so that a numeric flag's error names the flag and the
// range it accepts: CLI11's own conversion error ("Could not convert") names neither.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "ipc/cli_values.h"

namespace hearth {

// An integer flag's values: "--max-tokens: '2147483648' is not an integer from 0 to 16777216".
// Runs before CLI11 converts the text, so no value reaches a conversion that could fail.
inline CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator([lo, hi](std::string& text) { return integer_range_error(text, lo, hi); },
                        "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

}  // namespace hearth
