// What JSON from outside the process may be, in one place for frames, model files and
// profiles: nested no deeper than one limit (nlohmann copies and prints values recursively, so
// a small file of brackets could otherwise exhaust the stack), and, for text that is sent on
// as JSON, valid UTF-8. Error messages quote such JSON only through json_excerpt, which is
// short and never recurses deeper than its length.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hearth {

// The one nesting limit: a frame, a model's JSON files and a profile are refused beyond it.
inline constexpr int kMaxJsonDepth = 64;
// For documents that travel inside others: config.json sits in a manifest inside a reply
// frame, so it gets half, which leaves the outer documents the rest.
inline constexpr int kMaxEmbeddedJsonDepth = kMaxJsonDepth / 2;

// Text that is not JSON we accept: invalid, too deep, or not UTF-8.
class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws JsonError "WHAT: JSON nested deeper than N levels (at byte B)" when `text` opens more
// than `max_depth` arrays or objects inside each other. A linear scan that builds nothing;
// brackets inside strings do not count. `what` names the text ("config.json"); "" for none.
void check_json_depth(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth);

// Throws JsonError "WHAT: invalid JSON: contains a NUL byte at offset N" or "WHAT: invalid
// JSON: not valid UTF-8 at offset N", reasons the parser would misreport.
void check_json_text(std::string_view text, std::string_view what);

// check_json_text and check_json_depth, then parses (with nlohmann's `callback`, if any). A syntax
// error is "WHAT: invalid JSON: REASON at line L, column C": the text itself is never quoted, so a
// file that should not be readable does not leak through the message, which stays valid UTF-8.
nlohmann::json parse_json(std::string_view text, std::string_view what,
                          int max_depth = kMaxJsonDepth,
                          const nlohmann::json::parser_callback_t& callback = nullptr);

// nlohmann's parse error message without its "[json.exception.parse_error.101] " tag and
// without the "; last read: '...'" quote of the input, which can hold most of a body or a file
// the reader should not see.
std::string json_parse_error_reason(const char* what);

// `value` as compact JSON for an error message: at most about `max_chars` characters (then
// "..."), invalid UTF-8 replaced, built without recursing deeper than `max_chars`.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);

}  // namespace hearth
