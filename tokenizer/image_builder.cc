#include "image_builder.h"

#include <stdexcept>
#include <string>

#include "base/json_limits.h"

namespace hearth::tok {

const Json& bpe_model_of(const Json& root) {
  if (!root.is_object()) config_error("(root)", "expected an object");
  const Json& model = require(root, "model", "(root)");
  // Old files omit the model type; a vocabulary with merges can only be BPE.
  std::string type = "BPE";
  if (model.is_object() && model.contains("type")) {
    type = component_type(model, "model");
  } else if (!model.is_object() || !model.contains("merges")) {
    config_error("model", "missing 'type'");
  }
  if (type != "BPE") {
    config_error("model", "model type '" + type + "' is not supported (supported: BPE)");
  }
  return model;
}

TokenizerParts build_tokenizer_parts(std::string_view tokenizer_json) {
  // The shared reader of outside JSON: the readers below copy and print values, which
  // recurses, so a deep document is refused first; its messages never quote the text.
  const Json root = parse_json(tokenizer_json, "tokenizer.json");
  try {
    TokenizerParts parts;
    const Json& model = bpe_model_of(root);
    parts.tables = build_bpe_tables(model, "model");
    // Copy everything but the two big members (a deep copy of the root would copy them too).
    parts.settings = Json::object();
    for (const auto& [key, value] : root.items()) {
      if (key != "model") parts.settings[key] = value;
    }
    Json& model_settings = parts.settings["model"] = Json::object();
    for (const auto& [key, value] : model.items()) {
      if (key != "vocab" && key != "merges") model_settings[key] = value;
    }
    model_settings["type"] = "BPE";  // old files leave it out and let the merges say so
    return parts;
  } catch (const Json::exception& e) {
    // Defensive: a shape the readers did not anticipate still gets a clear message.
    throw std::runtime_error(std::string("tokenizer.json: unexpected structure: ") + e.what());
  }
}

}  // namespace hearth::tok
