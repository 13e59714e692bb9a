// Field, the gateway's one reader of a request body's values: every typed read takes exactly the
// values it documents, refuses the rest with a 400 whose param is the field's full name, and
// names children "parent.key" and "parent[i]" so a client can find the value at fault.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gateway/api_error.h"
#include "gateway/request_json.h"
#include "tests/gateway/api_error_of.h"

namespace hearth::gateway {
namespace {

using ordered_json = nlohmann::ordered_json;

// A refusal: a 400 naming `param`, with `why` in its message.
void expect_refused(const ApiError& e, const std::string& param, const std::string& why) {
  EXPECT_EQ(e.status(), 400) << e.what();
  EXPECT_EQ(e.param(), param) << e.what();
  EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
}

TEST(RequestField, ChildrenAreNamedByTheirPathFromTheBody) {
  const ordered_json body = ordered_json::parse(R"({"a": {"b": [10, {"c": true}]}})");
  const Field root(body, "");
  EXPECT_EQ(root["a"].name(), "a");
  EXPECT_EQ(root["a"]["b"].name(), "a.b");
  const std::vector<Field> items = root["a"]["b"].items();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].name(), "a.b[0]");
  EXPECT_EQ(items[1]["c"].name(), "a.b[1].c");
  EXPECT_TRUE(items[1]["c"].boolean());
  // The name reaches the 400 a bad value there gives.
  expect_refused(error_of([&] { items[0].string(10); }), "a.b[0]", "must be a string, got 10");
}

TEST(RequestField, AbsentAndNullAreNotPresentAndRequiredReadsSaySo) {
  const ordered_json body = ordered_json::parse(R"({"n": null})");
  const Field root(body, "");
  EXPECT_TRUE(root["n"].exists());
  EXPECT_FALSE(root["n"].present());
  EXPECT_FALSE(root["gone"].exists());
  EXPECT_FALSE(root["gone"].present());
  // A child of something absent is absent too, not an error.
  EXPECT_FALSE(root["gone"]["deeper"].exists());
  EXPECT_EQ(root["gone"].describe(), "nothing");
  expect_refused(error_of([&] { root["n"].integer(0, 1); }), "n", "is required");
  expect_refused(error_of([&] { root["gone"].boolean(); }), "gone", "is required");
  expect_refused(error_of([&] { root["gone"].token_ids(); }), "gone", "is required");
}

TEST(RequestField, MembersOfSomethingThatIsNotAnObjectAreRefused) {
  const ordered_json body = ordered_json::parse(R"({"s": "text", "a": [1]})");
  const Field root(body, "");
  expect_refused(error_of([&] { (void)root["s"]["x"]; }), "s", "must be an object, got \"text\"");
  expect_refused(error_of([&] { root["a"].keys(); }), "a", "must be an object");
  expect_refused(error_of([&] { root["s"].items(); }), "s", "must be an array");
  EXPECT_EQ(root.keys(), (std::vector<std::string>{"s", "a"}));  // in the body's order
}

TEST(RequestField, StringsAreBoundedInBytes) {
  const ordered_json body = ordered_json::parse("{\"s\": \"caf\xc3\xa9\", \"n\": 5}");
  const Field root(body, "");
  EXPECT_EQ(root["s"].string(5), "caf\xc3\xa9");  // five bytes, four characters
  expect_refused(error_of([&] { root["s"].string(4); }), "s", "at most 4 bytes, got 5");
  expect_refused(error_of([&] { root["n"].string(10); }), "n", "must be a string, got 5");
}

TEST(RequestField, BooleansAreOnlyTrueOrFalse) {
  const ordered_json body = ordered_json::parse(R"({"t": true, "one": 1, "s": "true"})");
  const Field root(body, "");
  EXPECT_TRUE(root["t"].boolean());
  expect_refused(error_of([&] { root["one"].boolean(); }), "one", "must be true or false");
  expect_refused(error_of([&] { root["s"].boolean(); }), "s", "must be true or false");
}

TEST(RequestField, IntegersAreWholeAndInRangeIncludingTheBounds) {
  const ordered_json body = ordered_json::parse(
      R"({"lo": -3, "hi": 7, "below": -4, "above": 8, "half": 1.5, "whole_float": 2.0,
          "huge": 18446744073709551615})");
  const Field root(body, "");
  EXPECT_EQ(root["lo"].integer(-3, 7), -3);
  EXPECT_EQ(root["hi"].integer(-3, 7), 7);
  expect_refused(error_of([&] { root["below"].integer(-3, 7); }), "below", "in [-3, 7], got -4");
  expect_refused(error_of([&] { root["above"].integer(-3, 7); }), "above", "in [-3, 7], got 8");
  expect_refused(error_of([&] { root["half"].integer(0, 9); }), "half", "must be an integer");
  // JSON's 2.0 is a float: OpenAI's integer fields do not take it.
  expect_refused(error_of([&] { root["whole_float"].integer(0, 9); }), "whole_float",
                 "must be an integer");
  // Past INT64_MAX must not wrap into range.
  expect_refused(error_of([&] { root["huge"].integer(INT64_MIN, INT64_MAX); }), "huge",
                 "got 18446744073709551615");
}

TEST(RequestField, NumbersAreFiniteAndInRange) {
  const ordered_json body =
      ordered_json::parse(R"({"i": 2, "f": 0.5, "neg": -0.1, "big": 1e300, "s": "1"})");
  const Field root(body, "");
  EXPECT_EQ(root["i"].number(0, 2), 2.0);  // integers are numbers
  EXPECT_EQ(root["f"].number(0, 1), 0.5);
  expect_refused(error_of([&] { root["neg"].number(0, 1); }), "neg", "must be in [0.0, 1.0]");
  expect_refused(error_of([&] { root["big"].number(0, 1e299); }), "big", "got 1e+300");
  EXPECT_EQ(root["big"].number(0, 1e301), 1e300);
  expect_refused(error_of([&] { root["s"].number(0, 9); }), "s", "must be a number, got \"1\"");
}

TEST(RequestField, Bits64TakesSignedAndUnsignedSeedsAsTheirBits) {
  const ordered_json body =
      ordered_json::parse(R"({"minus_one": -1, "max": 18446744073709551615, "f": 1.0})");
  const Field root(body, "");
  EXPECT_EQ(root["minus_one"].bits64(), UINT64_MAX);
  EXPECT_EQ(root["max"].bits64(), UINT64_MAX);
  expect_refused(error_of([&] { root["f"].bits64(); }), "f", "must be an integer");
}

TEST(RequestField, TokenIdsAreANonEmptyArrayOfInt32Ids) {
  const ordered_json body = ordered_json::parse(
      R"({"ok": [0, 2147483647], "empty": [], "past": [2147483648], "neg": [1, -1],
          "text": "1 2"})");
  const Field root(body, "");
  EXPECT_EQ(root["ok"].token_ids(), (std::vector<int32_t>{0, INT32_MAX}));
  expect_refused(error_of([&] { root["empty"].token_ids(); }), "empty", "must not be empty");
  expect_refused(error_of([&] { root["past"].token_ids(); }), "past", "got 2147483648");
  expect_refused(error_of([&] { root["neg"].token_ids(); }), "neg", "got -1");
  expect_refused(error_of([&] { root["text"].token_ids(); }), "text", "must be an array");
}

TEST(RequestField, ObjectsAndArraysAreHandedOnWholeOnceTheirTypeIsChecked) {
  const ordered_json body = ordered_json::parse(R"({"o": {"k": [1]}, "a": [{"x": 1}]})");
  const Field root(body, "");
  EXPECT_EQ(&root["o"].object(), &body["o"]);  // the body's own value, not a copy
  EXPECT_EQ(root["a"].array().size(), 1u);
  expect_refused(error_of([&] { root["o"].array(); }), "o", "must be an array, got an object");
  expect_refused(error_of([&] { root["a"].object(); }), "a",
                 "must be an object, got an array of 1 item");
}

}  // namespace
}  // namespace hearth::gateway
