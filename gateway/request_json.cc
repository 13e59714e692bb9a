#include "gateway/request_json.h"

#include <cmath>

#include "gateway/api_error.h"
#include "base/json_limits.h"

namespace hearth::gateway {

using ordered_json = nlohmann::ordered_json;

namespace {

constexpr size_t kExcerptBytes = 40;
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

ApiError bad_body(const std::string& why) {
  return ApiError(400, "invalid_request_error", why);
}

}  // namespace

ordered_json parse_request_body(std::string_view body) {
  // One leading UTF-8 byte order mark is skipped, as vLLM's server (Python's json.loads of
  // the body's bytes) does and RFC 8259 8.1 allows; a second one, or a UTF-16 or UTF-32
  // mark, is named rather than reported as a bad byte or a bad literal.
  if (body.starts_with(kUtf8Bom)) body.remove_prefix(kUtf8Bom.size());
  if (body.starts_with(kUtf8Bom))
    throw bad_body("the body starts with two UTF-8 byte order marks (U+FEFF); send at most one");
  if (body.starts_with("\xFF\xFE") || body.starts_with("\xFE\xFF"))
    throw bad_body("the body starts with a UTF-16 or UTF-32 byte order mark; send it as UTF-8");
  // First, before anything reads it: every later message may quote the body's text.
  if (const auto at = find_invalid_utf8(body))
    throw bad_body("the body is not valid UTF-8 (at byte " + std::to_string(*at) + ")");
  // nlohmann's parser stops at a NUL byte as at the end of its input, and would take what came
  // before for the whole body; JSON text never holds one raw.
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos)
    throw bad_body("the body holds a NUL byte (at byte " + std::to_string(nul) + ")");
  try {
    check_json_depth(body, "the body");
  } catch (const JsonError& e) {
    throw bad_body(e.what());
  }
  ordered_json parsed;
  try {
    parsed = ordered_json::parse(body);
  } catch (const ordered_json::exception& e) {
    throw bad_body("the body is not valid JSON: " + json_parse_error_reason(e.what()));
  }
  if (!parsed.is_object())
    throw bad_body(std::string("the body must be a JSON object, not ") + parsed.type_name());
  return parsed;
}

std::string excerpt(const ordered_json& v) {
  if (v.is_array())
    return "an array of " + std::to_string(v.size()) + (v.size() == 1 ? " item" : " items");
  if (v.is_object()) return "an object";
  if (!v.is_string()) return v.dump();  // a number, true, false or null: short
  const std::string& s = v.get_ref<const std::string&>();
  size_t cut = std::min(s.size(), kExcerptBytes);
  while (cut > 0 && cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return ordered_json(valid_utf8(std::string_view(s).substr(0, cut))).dump() +
         (cut < s.size() ? "..." : "");
}

std::string Field::describe() const {
  return value_ ? excerpt(*value_) : "nothing";
}

void Field::fail(const std::string& why) const {
  throw bad_param(name_, why);
}

const ordered_json& Field::required() const {
  if (!present()) fail("is required");
  return *value_;
}

Field Field::operator[](std::string_view key) const {
  const std::string child = name_.empty() ? std::string(key) : name_ + "." + std::string(key);
  if (!present()) return Field(nullptr, child);
  if (!value_->is_object()) fail("must be an object, got " + excerpt(*value_));
  const auto it = value_->find(key);
  if (it == value_->end()) return Field(nullptr, child);
  return Field(*it, child);
}

std::vector<Field> Field::items() const {
  const ordered_json& v = array();
  std::vector<Field> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out.emplace_back(v[i], name_ + "[" + std::to_string(i) + "]");
  return out;
}

std::vector<std::string> Field::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, _] : object().items()) out.push_back(key);
  return out;
}

std::string Field::string(size_t max_bytes) const {
  const ordered_json& v = required();
  if (!v.is_string()) fail("must be a string, got " + excerpt(v));
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes)
    fail("must be at most " + std::to_string(max_bytes) + " bytes, got " +
         std::to_string(s.size()));
  return s;
}

bool Field::boolean() const {
  const ordered_json& v = required();
  if (!v.is_boolean()) fail("must be true or false, got " + excerpt(v));
  return v.get<bool>();
}

int64_t Field::integer(int64_t lo, int64_t hi) const {
  const ordered_json& v = required();
  if (!v.is_number_integer()) fail("must be an integer, got " + excerpt(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    fail("must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi)
    fail("must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  return i;
}

double Field::number(double lo, double hi) const {
  const ordered_json& v = required();
  if (!v.is_number()) fail("must be a number, got " + excerpt(v));
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    fail("must be in [" + ordered_json(lo).dump() + ", " + ordered_json(hi).dump() + "], got " +
         v.dump());
  return d;
}

int64_t Field::integer() const {
  const ordered_json& v = required();
  if (!v.is_number_integer()) fail("must be an integer, got " + excerpt(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    fail("must fit in 64 bits, got " + v.dump());
  return v.get<int64_t>();
}

double Field::number() const {
  const ordered_json& v = required();
  if (!v.is_number()) fail("must be a number, got " + excerpt(v));
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail("must be a finite number, got " + v.dump());
  return d;
}

uint64_t Field::bits64() const {
  const ordered_json& v = required();
  if (!v.is_number_integer()) fail("must be an integer, got " + excerpt(v));
  return v.is_number_unsigned() ? v.get<uint64_t>() : uint64_t(v.get<int64_t>());
}

std::vector<int32_t> Field::token_ids() const {
  const ordered_json& v = array();
  if (v.empty()) fail("must not be empty");
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (const ordered_json& t : v) {
    if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<uint64_t>() > INT32_MAX) ||
        (!t.is_number_unsigned() && (t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)))
      fail("token ids must be integers in [0, 2147483647], got " + excerpt(t));
    out.push_back(int32_t(t.get<int64_t>()));
  }
  return out;
}

const ordered_json& Field::object() const {
  const ordered_json& v = required();
  if (!v.is_object()) fail("must be an object, got " + excerpt(v));
  return v;
}

const ordered_json& Field::array() const {
  const ordered_json& v = required();
  if (!v.is_array()) fail("must be an array, got " + excerpt(v));
  return v;
}

}  // namespace hearth::gateway
