#include "base/json_limits.h"
#include "base/utf8.h"

namespace hearth {

namespace {

[[noreturn]] void fail(std::string_view what, const std::string& why) {
  throw JsonError(what.empty() ? why : std::string(what) + ": " + why);
}

// Appends `v` as JSON to `out` until `out` holds `limit` characters. Each level of nesting
// adds at least one character first, so the recursion is at most `limit` deep.
void append_excerpt(const nlohmann::json& v, std::string& out, size_t limit) {
  if (out.size() >= limit) return;
  using Kind = nlohmann::json::value_t;
  if (v.type() == Kind::array || v.type() == Kind::object) {
    const bool array = v.is_array();
    out += array ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() < limit; ++it) {
      if (!first) out += ',';
      first = false;
      if (!array) {
        append_excerpt(nlohmann::json(it.key().substr(0, limit)), out, limit);
        out += ':';
      }
      append_excerpt(*it, out, limit);
    }
    out += array ? ']' : '}';
    return;
  }
  if (v.is_string()) {
    // Only the part that can show: a long string is not copied whole.
    const std::string& s = v.get_ref<const std::string&>();
    out += nlohmann::json(s.substr(0, limit - out.size() + 1))
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  out += v.dump();
}

}  // namespace

void check_json_depth(std::string_view text, std::string_view what, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character, which may be a quote
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        fail(what, "JSON nested deeper than " + std::to_string(max_depth) + " levels (at byte " +
                       std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is the parser's to refuse
    }
  }
}

void check_json_text(std::string_view text, std::string_view what) {
  // nlohmann reads a NUL as the end of its input: "\0{...}" would be "unexpected end of input"
  // and "{}\0..." would parse as {} with the rest ignored. JSON text never holds a raw NUL.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    fail(what, "invalid JSON: contains a NUL byte at offset " + std::to_string(nul) +
                   " (JSON text has none)");
  if (const auto at = find_invalid_utf8(text))
    fail(what, "invalid JSON: not valid UTF-8 at offset " + std::to_string(*at) +
                   " (JSON text is UTF-8)");
}

nlohmann::json parse_json(std::string_view text, std::string_view what, int max_depth,
                          const nlohmann::json::parser_callback_t& callback) {
  check_json_text(text, what);
  check_json_depth(text, what, max_depth);
  try {
    return nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::exception& e) {
    fail(what, "invalid JSON: " + json_parse_error_reason(e.what()));
  }
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  std::string out;
  append_excerpt(value, out, max_chars);
  if (out.size() <= max_chars) return out;
  // Cut at a character boundary so the message stays valid UTF-8.
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
  out.resize(cut);
  return out + "...";
}

std::string json_parse_error_reason(const char* what) {
  std::string text(what);
  if (!text.empty() && text.front() == '[') {
    if (const size_t end = text.find("] "); end != std::string::npos) text.erase(0, end + 2);
  }
  if (const size_t quote = text.find("; last read: '"); quote != std::string::npos) {
    const size_t next = text.find("'; ", quote + 14);
    text.erase(quote, next == std::string::npos ? std::string::npos : next + 1 - quote);
  }
  return text;
}

}  // namespace hearth
