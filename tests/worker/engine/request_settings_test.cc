// The one place request settings' ranges are checked: every edge of every range, once. Profiles,
// request JSON and the gateway read through these checks (their tests assert only how they
// name the field), and the engine checks each request it is given with check_settings.
#include "worker/engine/request_settings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

namespace hearth {
namespace {

// The SettingError `f` throws, or nothing.
std::optional<SettingError> error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const SettingError& e) {
    return e;
  }
  return std::nullopt;
}

struct Edge {
  std::string field;
  double value;
  const char* refusal;  // nullptr: accepted
};

// Stores `value` in the field as code would, with no check.
RequestSettings with(const std::string& field, double value) {
  RequestSettings s;
  if (field == "temperature") s.sampling.temperature = float(value);
  if (field == "top_k") s.sampling.top_k = int(value);
  if (field == "top_p") s.sampling.top_p = float(value);
  if (field == "min_p") s.sampling.min_p = float(value);
  if (field == "repetition_penalty") s.sampling.repetition_penalty = float(value);
  if (field == "max_tokens") s.max_tokens = int(value);
  if (field == "logprobs") s.logprobs = int(value);
  return s;
}

void read(const std::string& field, double value) {
  if (field == "temperature") checked_temperature(value);
  if (field == "top_k") checked_top_k(int64_t(value));
  if (field == "top_p") checked_top_p(value);
  if (field == "min_p") checked_min_p(value);
  if (field == "repetition_penalty") checked_repetition_penalty(value);
  if (field == "max_tokens") checked_max_tokens(int64_t(value));
  if (field == "logprobs") checked_logprobs(int64_t(value));
}

TEST(RequestSettings, EveryRangeEdgeIsRefusedOrTakenTheSameByTheReaderAndTheCheck) {
  const Edge edges[] = {
      {"temperature", 0, nullptr},
      {"temperature", 100, nullptr},
      {"temperature", 100.5, "must be in [0, 100], got 100.5"},
      {"temperature", -0.1, "must be in [0, 100], got -0.1"},
      {"temperature", NAN, "must be in [0, 100], got nan"},
      {"top_k", 0, nullptr},
      {"top_k", 1 << 30, nullptr},
      {"top_k", -1, "must be in [0, 1073741824], got -1"},
      {"top_p", 1e-6, nullptr},
      {"top_p", 1, nullptr},
      {"top_p", 0, "must be greater than 0"},
      {"top_p", 1.01, "must be in [0, 1], got 1.01"},
      {"min_p", 0, nullptr},
      {"min_p", 1, nullptr},
      {"min_p", -0.1, "must be in [0, 1], got -0.1"},
      {"repetition_penalty", 1e-3, nullptr},
      {"repetition_penalty", 100, nullptr},
      {"repetition_penalty", 0, "must be in [0.001, 100], got 0"},
      {"repetition_penalty", 101, "must be in [0.001, 100], got 101"},
      {"max_tokens", 0, nullptr},
      {"max_tokens", 1 << 24, nullptr},
      {"max_tokens", -1, "must be in [0, 16777216], got -1"},
      {"max_tokens", (1 << 24) + 1, "must be in [0, 16777216], got 16777217"},
      {"logprobs", 0, nullptr},
      {"logprobs", 20, nullptr},
      {"logprobs", 21, "must be in [0, 20], got 21"},
  };
  for (const Edge& e : edges) {
    const std::string what = e.field + " = " + std::to_string(e.value);
    for (const auto& refused : {error_of([&] { read(e.field, e.value); }),
                                error_of([&] { check_settings(with(e.field, e.value)); })}) {
      if (!e.refusal) {
        EXPECT_FALSE(refused) << what << ": " << refused->what();
        continue;
      }
      ASSERT_TRUE(refused) << what << " was accepted";
      EXPECT_EQ(refused->field(), e.field) << what;
      EXPECT_EQ(refused->reason(), e.refusal) << what;
      EXPECT_EQ(std::string(refused->what()), e.field + ": " + e.refusal);
    }
  }
  EXPECT_FALSE(error_of([] { check_settings(RequestSettings{}); }));
}

// A value too large for its field's type is refused as itself, never wrapped or rounded into
// range first.
TEST(RequestSettings, WideValuesAreRefusedBeforeTheyAreNarrowed) {
  EXPECT_EQ(error_of([] { checked_top_k(int64_t(1) << 32); })->reason(),
            "must be in [0, 1073741824], got 4294967296");
  EXPECT_EQ(error_of([] { checked_max_tokens(int64_t(1) << 32); })->field(), "max_tokens");
  EXPECT_EQ(error_of([] { checked_temperature(1e300); })->reason(),
            "must be in [0, 100], got 1e+300");
  // Greater than 0 as a double but 0 as the float it is stored as: it would keep no token.
  EXPECT_EQ(error_of([] { checked_top_p(1e-50); })->reason(), "must be greater than 0");
  EXPECT_EQ(checked_temperature(0.8), 0.8f);
  EXPECT_EQ(checked_top_k(40), 40);
}

TEST(RequestSettings, StopStringsMustBeNonEmpty) {
  EXPECT_FALSE(error_of([] { check_stop_strings({"a", "\n\n"}); }));
  const auto e = error_of([] { check_stop_strings({"a", ""}); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field(), "stop");
  EXPECT_EQ(e->reason(), "stop strings must be non-empty");
  RequestSettings s;
  s.stop = {""};
  EXPECT_EQ(error_of([&] { check_settings(s); })->field(), "stop");
}

}  // namespace
}  // namespace hearth
