// The strict readers behind hearth-worker's flags: every value reads exactly or is refused.
#include "ipc/cli_values.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace hearth {
namespace {

TEST(CliValues, UnsignedIsDigitsOnlyAndNeverWraps) {
  EXPECT_EQ(parse_unsigned("0"), 0u);
  EXPECT_EQ(parse_unsigned("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1e23", "0x10", "1.0", "18446744073709551616",
                          "99999999999999999999999"})
    EXPECT_EQ(parse_unsigned(bad), std::nullopt) << bad;
  EXPECT_EQ(parse_unsigned("2147483647", INT32_MAX), INT32_MAX);
  EXPECT_EQ(parse_unsigned("2147483648", INT32_MAX), std::nullopt);
}

TEST(CliValues, OnlyFiniteNumbersPass) {
  for (const char* good : {"0", "0.8", "1e-3", "-2", "100"})
    EXPECT_EQ(finite_number_error(good), "") << good;
  EXPECT_EQ(finite_number_error("nan"), "'nan' is not a finite number");
  EXPECT_EQ(finite_number_error("-inf"), "'-inf' is not a finite number");
  EXPECT_EQ(finite_number_error("1e999"), "'1e999' is not a finite number");
  EXPECT_EQ(finite_number_error("0.8x"), "'0.8x' is not a number");
  EXPECT_EQ(finite_number_error(""), "'' is not a number");
}

// Issue 21: CLI11 said "Could not convert" for an int flag's 2147483648, without the range.
TEST(CliValues, IntegerRangeErrorsNameTheRange) {
  for (const char* good : {"0", "5", "16777216", "-0"})
    EXPECT_EQ(integer_range_error(good, 0, 1 << 24), "") << good;
  EXPECT_EQ(integer_range_error("-9223372036854775808", INT64_MIN, INT64_MAX), "");
  EXPECT_EQ(integer_range_error("9223372036854775807", INT64_MIN, INT64_MAX), "");
  EXPECT_EQ(integer_range_error("2147483648", 0, 1 << 24),
            "'2147483648' is not an integer from 0 to 16777216");
  for (const char* bad :
       {"-1", "16777217", "18446744073709551616", "1e3", "1.0", "", "-", "x", "+1", " 1", "--1"})
    EXPECT_NE(integer_range_error(bad, 0, 1 << 24).find("is not an integer from 0 to 16777216"),
              std::string::npos)
        << bad;
  EXPECT_NE(integer_range_error("-9223372036854775809", INT64_MIN, INT64_MAX), "");
  EXPECT_NE(integer_range_error("-5", -4, 4), "");
  EXPECT_EQ(integer_range_error("-4", -4, 4), "");
}

// --idle-exit's reader: "1e10" once meant 10^13 ms (an overflow, exiting at once), "1e300" and
// "nan" silently never, "inf" a 310-digit bound.
TEST(CliValues, SecondsAreFiniteInRangeAndWholeMilliseconds) {
  using std::chrono::milliseconds;
  EXPECT_EQ(parse_seconds("0", 1e6), milliseconds(0));
  EXPECT_EQ(parse_seconds("0.5", 1e6), milliseconds(500));
  EXPECT_EQ(parse_seconds("0.001", 1e6), milliseconds(1));
  EXPECT_EQ(parse_seconds("1e6", 1e6), milliseconds(1'000'000'000));
  EXPECT_EQ(parse_seconds("300", 1e6), milliseconds(300'000));
  for (const char* bad : {"1e10", "1e300", "nan", "inf", "-inf", "-1", "-0.5", "1000000.001",
                          "0.0001", "", "5s", "0x10p0"})
    EXPECT_EQ(parse_seconds(bad, 1e6), std::nullopt) << bad;
}

TEST(CliValues, TokenListsHaveNoEmptyItems) {
  EXPECT_EQ(parse_token_list("5", "--t"), std::vector<int32_t>({5}));
  EXPECT_EQ(parse_token_list("1,2,2147483647", "--t"), std::vector<int32_t>({1, 2, 2147483647}));
  auto message = [](const char* text) {
    try {
      parse_token_list(text, "--prompt-tokens");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message("5,"),
            "--prompt-tokens: '5,' has an empty item (token ids are separated by single commas)");
  EXPECT_NE(message(",5").find("has an empty item"), std::string::npos);
  EXPECT_NE(message("1,,2").find("has an empty item"), std::string::npos);
  EXPECT_NE(message("").find("has an empty item"), std::string::npos);
  EXPECT_EQ(message("1,-2"), "--prompt-tokens: '-2' is not a token id (0 to 2147483647)");
  EXPECT_EQ(message("2147483648"),
            "--prompt-tokens: '2147483648' is not a token id (0 to 2147483647)");
  EXPECT_EQ(message(" 7"), "--prompt-tokens: ' 7' is not a token id (0 to 2147483647)");
}

}  // namespace
}  // namespace hearth
