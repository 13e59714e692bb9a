#include "gateway/model_catalog.h"

#include <chrono>

#include "ipc/client.h"
#include "weight-server/sharing/manifest.h"
#include "weight-server/sharing/model_import.h"
#include "tokenizer/tokenizer_loader.h"

namespace hearth::gateway {

using json = nlohmann::json;

namespace {

json parse_optional_json(std::string_view text, const std::string& what) {
  if (text.empty()) return json::object();
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error(what + " is not valid JSON");
  return j;
}

ModelEntry entry_from_manifest(const Manifest& m, const SharedFiles& files,
                               const std::function<void(const std::string&)>& log,
                               const std::optional<std::string>& chat_template) {
  ModelEntry e;
  e.name = m.model;
  e.context_length = m.config.max_position;
  e.tensor_parallel = m.tensor_parallel;
  e.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  TokenizerInputs inputs;
  inputs.json = files.text(kTokenizerJsonFile);
  inputs.image = files.bytes(kTokenizerImageFile);
  inputs.image_owner = files.owner(kTokenizerImageFile);
  inputs.image_refusal = files.image_refusal();
  inputs.warn = log;
  std::optional<LoadedTokenizer> loaded = load_tokenizer(inputs);
  if (!loaded)
    throw std::runtime_error("model '" + m.model +
                             "' has no tokenizer.json: the gateway needs one to serve it");
  e.tokenizer = std::make_shared<const Tokenizer>(std::move(loaded->tokenizer));
  e.defaults = GenerationDefaults::from_generation_config(
      parse_optional_json(files.text(kGenerationConfigFile), m.model + ": generation_config.json"));

  const json tokenizer_config =
      parse_optional_json(files.text(kTokenizerConfigFile), m.model + ": tokenizer_config.json");
  try {
    ChatTemplateConfig config;
    if (chat_template) {
      // The special tokens still come from the model's own config, when it names them.
      try {
        config = ChatTemplate::from_tokenizer_config(tokenizer_config);
      } catch (const std::exception&) {
      }
      config.source = *chat_template;
    } else {
      config = ChatTemplate::from_tokenizer_config(tokenizer_config);
    }
    e.bos_token = config.bos_token;
    e.eos_token = config.eos_token;
    e.chat_template = ChatTemplate::load(config.source);
    e.tool_format = tool_format_of_template(config.source);
  } catch (const std::exception& err) {
    e.chat_template_error = "model '" + m.model + "' has no usable chat template: " + err.what();
    log(e.chat_template_error + " (chat completions are refused; completions work)");
  }
  return e;
}

}  // namespace

ModelCatalog ModelCatalog::load(const std::string& socket,
                                const std::function<void(const std::string&)>& log,
                                const std::optional<std::string>& chat_template) {
  ipc::ClientOptions options;
  options.name = "hearth-gateway";
  ipc::Client client = ipc::Client::connect(socket, options);
  const ipc::Frame listed = client.call(ipc::op::kList);
  ModelCatalog catalog;
  for (const json& summary : listed.body.at("models")) {
    const std::string name = summary.at("name").get<std::string>();
    const FetchedManifest fetched = fetch_manifest(client, name);
    catalog.models_.emplace(
        name, entry_from_manifest(fetched.manifest, fetched.files, log, chat_template));
  }
  return catalog;
}

const ModelEntry* ModelCatalog::find(const std::string& name) const {
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : &it->second;
}

std::vector<std::string> ModelCatalog::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : models_) out.push_back(name);
  return out;
}

}  // namespace hearth::gateway
