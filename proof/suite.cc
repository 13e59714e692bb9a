#include "proof/suite.h"

#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "base/json_limits.h"
#include "base/digest.h"
#include "base/read_file.h"
#include "worker/engine/request_settings.h"

namespace hearth::proof {

using json = nlohmann::json;

namespace {

class LineError {
 public:
  LineError(const std::filesystem::path& path, size_t line) : path_(path), line_(line) {}
  [[noreturn]] void operator()(const std::string& why) const {
    throw std::runtime_error(path_.string() + ":" + std::to_string(line_) + ": " + why);
  }

 private:
  const std::filesystem::path& path_;
  size_t line_;
};

std::string parse_id(const json& v, const LineError& fail) {
  if (v.is_string() && !v.get<std::string>().empty()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  fail("\"id\" must be a non-empty string or an integer, got " + v.dump());
}

std::vector<int32_t> parse_tokens(const json& v, const LineError& fail) {
  if (!v.is_array() || v.empty()) fail("\"prompt_tokens\" must be a non-empty array of token ids");
  std::vector<int32_t> ids;
  size_t arg_bytes = 0;
  for (const json& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      fail("\"prompt_tokens\" holds " + t.dump() + ", not a token id (an integer >= 0)");
    ids.push_back(t.get<int32_t>());
    arg_bytes += std::to_string(ids.back()).size() + 1;
  }
  if (arg_bytes > kMaxPromptArgBytes)
    fail("\"prompt_tokens\" is too long to pass to a worker (" + std::to_string(ids.size()) +
         " ids)");
  return ids;
}

std::string parse_text(const json& v, const LineError& fail) {
  if (!v.is_string() || v.get<std::string>().empty()) fail("\"prompt\" must be a non-empty string");
  const std::string text = v.get<std::string>();
  if (text.find('\0') != std::string::npos) fail("\"prompt\" contains a NUL character");
  if (text.size() > kMaxPromptArgBytes)
    fail("\"prompt\" is " + std::to_string(text.size()) + " bytes, more than the " +
         std::to_string(kMaxPromptArgBytes) + " a worker's command line can carry");
  return text;
}

}  // namespace

Suite load_suite(const std::filesystem::path& path) {
  Suite suite;
  suite.path = path;
  suite.name = path.stem().string();
  const std::string content = read_file(path);
  suite.checksum = to_hex(xxh3_128(content));

  std::set<std::string> ids;
  std::istringstream lines(content);
  std::string line;
  size_t line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const LineError fail(path, line_no);
    json obj;
    try {
      obj = parse_json(line, "");
    } catch (const JsonError& e) {
      fail(e.what());
    }
    if (!obj.is_object()) fail("each line must be a JSON object");

    SuitePrompt p;
    p.line = line_no;
    for (const auto& [key, value] : obj.items()) {
      if (key == "id") {
        p.id = parse_id(value, fail);
      } else if (key == "prompt") {
        p.text = parse_text(value, fail);
      } else if (key == "prompt_tokens") {
        p.tokens = parse_tokens(value, fail);
      } else if (key == "max_tokens") {
        // At least 1 (a prompt that generates nothing proves nothing), at most what a request
        // may ask for (request_settings.h).
        if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
            value.get<int64_t>() > kMaxTokensLimit)
          fail("\"max_tokens\" must be an integer in [1, " + std::to_string(kMaxTokensLimit) +
               "], got " + value.dump());
        p.max_tokens = value.get<int>();
      } else if (key == "meta") {
        p.meta = value;
      } else {
        fail("unknown key \"" + key + "\" (known: id, prompt, prompt_tokens, max_tokens, meta)");
      }
    }
    if (!obj.contains("id")) fail("missing \"id\"");
    if (p.text && !p.tokens.empty()) fail("give \"prompt\" or \"prompt_tokens\", not both");
    if (!p.text && p.tokens.empty()) fail("missing \"prompt\" (or \"prompt_tokens\")");
    if (!ids.insert(p.id).second) fail("duplicate id \"" + p.id + "\"");
    suite.prompts.push_back(std::move(p));
  }
  if (suite.prompts.empty()) throw std::runtime_error(path.string() + ": the suite has no prompts");
  return suite;
}

std::optional<int> token_limit(const SuitePrompt& prompt, std::optional<int> budget) {
  if (prompt.max_tokens && budget) return std::min(*prompt.max_tokens, *budget);
  return prompt.max_tokens ? prompt.max_tokens : budget;
}

}  // namespace hearth::proof
