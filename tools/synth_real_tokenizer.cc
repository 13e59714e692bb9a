#include "tools/synth_real_tokenizer.h"

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/read_file.h"

namespace hearth {
namespace {

using json = nlohmann::json;

// A special token of tokenizer_config.json: a string, or {"content": string} (AddedToken).
std::string token_text(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return "";
}

}  // namespace

RealTokenizer read_real_tokenizer(const std::filesystem::path& path) {
  const std::filesystem::path file =
      std::filesystem::is_directory(path) ? path / "tokenizer.json" : path;
  RealTokenizer t;
  t.tokenizer_json = read_file(file);
  const json doc = json::parse(t.tokenizer_json, nullptr, false);
  if (!doc.is_object() || !doc.contains("model") || !doc["model"].contains("vocab") ||
      !doc["model"]["vocab"].is_object())
    throw std::runtime_error(file.string() + ": not a tokenizer.json with a model.vocab object");

  json ids = json::object();  // token text -> id
  for (const auto& [token, id] : doc["model"]["vocab"].items()) ids[token] = id;
  if (doc.contains("added_tokens") && doc["added_tokens"].is_array())
    for (const json& added : doc["added_tokens"])
      if (added.contains("content") && added.contains("id"))
        ids[added["content"].get<std::string>()] = added["id"];
  for (const auto& [token, id] : ids.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0)
      throw std::runtime_error(file.string() + ": token '" + token + "' has no valid id");
    t.vocab_needed = std::max(t.vocab_needed, id.get<int64_t>() + 1);
  }

  const std::filesystem::path config_file = file.parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_file)) {
    t.tokenizer_config_json = read_file(config_file);
    const json config = json::parse(t.tokenizer_config_json, nullptr, false);
    if (!config.is_object()) throw std::runtime_error(config_file.string() + ": not a JSON object");
    auto id_of = [&](const char* key) -> std::optional<int64_t> {
      const std::string text = token_text(config, key);
      if (text.empty() || !ids.contains(text)) return std::nullopt;
      return ids[text].get<int64_t>();
    };
    t.bos_id = id_of("bos_token");
    t.eos_id = id_of("eos_token");
  }
  return t;
}

}  // namespace hearth
