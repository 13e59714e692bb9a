#include "worker/request_file.h"

#include <nlohmann/json.hpp>

#include "base/json_limits.h"
#include "ipc/serve_limits.h"
#include "worker/engine/profile.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

using json = nlohmann::json;

Request request_from_json(json obj, const RequestSettings& defaults, const Tokenizer* tokenizer,
                          const std::string& where) {
  if (!obj.is_object()) throw std::runtime_error(where + ": not a JSON object");
  if (!obj.contains("id") || !obj["id"].is_string() || obj["id"].get<std::string>().empty())
    throw std::runtime_error(where + ": \"id\" must be a non-empty string");
  Request request;
  request.id = obj["id"].get<std::string>();
  obj.erase("id");
  // Every event repeats the id: a long one would multiply every client's memory and traffic.
  if (request.id.size() > ipc::kMaxRequestIdBytes)
    throw std::runtime_error(where + ": \"id\" is " + std::to_string(request.id.size()) +
                             " bytes (at most " + std::to_string(ipc::kMaxRequestIdBytes) + ")");
  const std::string label = where + " (request '" + request.id + "')";

  const bool has_text = obj.contains("prompt"), has_tokens = obj.contains("prompt_tokens");
  if (has_text == has_tokens)
    throw std::runtime_error(label + ": give exactly one of \"prompt\" and \"prompt_tokens\"");
  if (has_text) {
    if (!obj["prompt"].is_string())
      throw std::runtime_error(label + ": \"prompt\" must be a string");
    if (!tokenizer)
      throw std::runtime_error(label + ": the model has no tokenizer.json; use \"prompt_tokens\"");
    // Every byte of the string, a NUL included: the tokenizer takes a size, not a C string.
    request.prompt =
        tokenizer->encode(obj["prompt"].get<std::string>(), /*add_special_tokens=*/true);
    obj.erase("prompt");
  } else {
    const json& ids = obj["prompt_tokens"];
    if (!ids.is_array()) throw std::runtime_error(label + ": \"prompt_tokens\" must be an array");
    for (const json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        throw std::runtime_error(label + ": \"prompt_tokens\": " + id.dump() +
                                 " is not a token id");
      request.prompt.push_back(id.get<int32_t>());
    }
    obj.erase("prompt_tokens");
  }
  request.settings = defaults;
  apply_request_json(request.settings, obj, label);
  return request;
}

std::vector<RequestLine> parse_request_lines(std::string_view text, const RequestSettings& defaults,
                                             const Tokenizer* tokenizer) {
  std::vector<RequestLine> lines;
  int number = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    RequestLine& out = lines.emplace_back();
    out.line = number;
    const std::string where = "line " + std::to_string(number);
    json obj;
    try {
      // Through the one reader of outside JSON: depth, NUL bytes and UTF-8 are named.
      obj = parse_json(line, where);
      out.request = request_from_json(obj, defaults, tokenizer, where);
    } catch (const std::exception& e) {
      // Name the request in its error event if the line says who it is.
      const bool named = obj.is_object() && obj.contains("id") && obj["id"].is_string() &&
                         !obj["id"].get<std::string>().empty();
      out.request.id = named ? obj["id"].get<std::string>() : where;
      out.error = e.what();
    }
  }
  return lines;
}

}  // namespace hearth
