// Reading a request body: the one place where the gateway turns a client's bytes into JSON and
// JSON into typed values. Every failure, of parsing or of a field's type or range, is an
// ApiError 400 naming the field, and every message quotes the client's values only through
// excerpt(), which is short and valid UTF-8. Endpoints read their bodies only through this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hearth::gateway {

// The body as a JSON object, after one leading UTF-8 byte order mark if it has one (vLLM
// accepts it too). Refused with a 400, in this order: a second UTF-8 byte order mark or a
// UTF-16/UTF-32 one (named as such), bytes that are not well-formed UTF-8 ("the body is not valid
// UTF-8 (at byte N)"), nesting deeper than kMaxJsonDepth, text that is not JSON (the parser's
// reason and position, never a quote of the body), and JSON that is not an object.
nlohmann::ordered_json parse_request_body(std::string_view body);

// `v` for an error message: at most about 40 characters of its JSON (strings cut at a
// character boundary, containers summarised), always valid UTF-8.
std::string excerpt(const nlohmann::ordered_json& v);

// A value in a request body and its name in a 400 ("messages[2].content"); absent values are
// fine to hold (present() says whether there is one).
class Field {
 public:
  Field(const nlohmann::ordered_json& value, std::string name)
      : value_(&value), name_(std::move(name)) {}
  Field(std::nullptr_t, std::string name) : value_(nullptr), name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  bool exists() const { return value_ != nullptr; }
  bool present() const { return value_ && !value_->is_null(); }  // there and not null
  bool is_string() const { return present() && value_->is_string(); }
  bool is_number() const { return present() && value_->is_number(); }
  bool is_array() const { return present() && value_->is_array(); }
  bool is_object() const { return present() && value_->is_object(); }

  // A member of this object (absent when it has none by that name). Throws when this is
  // present and not an object.
  Field operator[](std::string_view key) const;
  // The items of this array, each named "name[i]". Throws when this is not an array.
  std::vector<Field> items() const;
  // The keys of this object. Throws when this is not an object.
  std::vector<std::string> keys() const;

  // Typed reads of a present value; each throws a 400 "'name': must be ..., got ..." for a
  // value of another type or out of range, and "'name': is required" when absent.
  std::string string(size_t max_bytes) const;
  bool boolean() const;
  int64_t integer(int64_t lo, int64_t hi) const;
  double number(double lo, double hi) const;
  // Any integer that fits int64_t, any finite number: for values whose range another checks
  // (the request settings', request_settings.h).
  int64_t integer() const;
  double number() const;
  // A signed or unsigned 64-bit integer, as its bits (OpenAI's seed).
  uint64_t bits64() const;
  // Token ids: a non-empty array of integers in [0, INT32_MAX].
  std::vector<int32_t> token_ids() const;
  // The value itself, once its type is checked: for objects and arrays handed on whole (chat
  // messages and template arguments go to the template as JSON).
  const nlohmann::ordered_json& object() const;
  const nlohmann::ordered_json& array() const;

  // The value for an error message: excerpt() of it, or "nothing" when absent.
  std::string describe() const;

  // A 400 naming this field.
  [[noreturn]] void fail(const std::string& why) const;

 private:
  const nlohmann::ordered_json& required() const;

  const nlohmann::ordered_json* value_;
  std::string name_;
};

}  // namespace hearth::gateway
