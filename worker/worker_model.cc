#include "worker/worker_model.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/json_limits.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/host_store.h"
#include "weight-server/model/quantize_at_load.h"
#include "worker/model_identity.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

WorkerModel open_model_dir(const std::filesystem::path& dir, bool quantize_fp8) {
  // tokenizer.json is opened from its cached image, built from these bytes when they parsed,
  // or parsed now: either way its checks are the parser's, not another pass here.
  HfOpenOptions options;
  options.check_tokenizer_json = false;
  auto hf = std::make_shared<const HfModel>(HfModel::open(dir, options));
  if (quantize_fp8 && !hf->config().quantization.fp8())
    hf = std::make_shared<const HfModel>(
        quantize_fp8_at_load(*hf, int(std::max(1u, std::thread::hardware_concurrency()))));
  WorkerModel m;
  m.name = std::filesystem::absolute(dir).lexically_normal().filename().string();
  if (m.name.empty()) m.name = std::filesystem::absolute(dir).parent_path().filename().string();
  m.tokenizer_json = hf->tokenizer_json();
  m.tokenizer_config_json = hf->tokenizer_config_json();
  m.generation_config_json = hf->generation_config_json();
  m.store = std::make_shared<HostStore>(hf);
  m.source = hf;
  m.identity = model_identity(*hf);
  return m;
}

WorkerModel attach_served_model(const std::string& socket, const std::string& name,
                                const ServedModelOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  ipc::ClientOptions client_options;
  client_options.name = "hearth-worker";
  client_options.server_uid = options.server_uid;
  auto client = std::make_shared<ipc::Client>(ipc::Client::connect(socket, client_options));
  WorkerModel m;
  m.connect_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ImportOptions import;
  import.verify = options.verify_weights;
  import.on_device = options.on_device;
  import.rank = options.rank;
  import.all_ranks = !options.rank;  // the CPU engine runs a sharded model's ranks in process
  ImportedModel imported = import_served_model(*client, name, import);
  m.name = imported.manifest.model;
  // One rank of a sharded model is named by the whole model: every rank of a tensor-parallel
  // group (worker/tp/) holds the same identity, the one a worker importing every rank holds.
  m.identity =
      model_identity(imported.whole_manifest ? *imported.whole_manifest : imported.manifest);
  m.files = std::make_shared<const SharedFiles>(std::move(imported.files));
  m.tokenizer_json = m.files->text(kTokenizerJsonFile);
  m.tokenizer_config_json = m.files->text(kTokenizerConfigFile);
  m.generation_config_json = m.files->text(kGenerationConfigFile);
  m.store = std::move(imported.store);
  m.ranks = std::move(imported.ranks);
  m.import_timings = imported.timings;
  m.server = std::move(client);
  return m;
}

std::optional<LoadedTokenizer> load_model_tokenizer(const WorkerModel& model) {
  TokenizerInputs inputs;
  inputs.json = model.tokenizer_json;
  if (model.files) {
    inputs.image = model.files->bytes(kTokenizerImageFile);
    inputs.image_owner = model.files->owner(kTokenizerImageFile);
    inputs.image_refusal = model.files->image_refusal();
  } else {
    inputs.cache = TokenizerCacheOptions{};
  }
  return load_tokenizer(inputs);
}

std::vector<int32_t> end_of_sequence_ids(const WorkerModel& model, const Tokenizer* tokenizer) {
  std::vector<int32_t> ids;
  for (int id : eos_token_ids(model.store->config(), model.generation_config_json))
    ids.push_back(id);
  if (tokenizer && !model.tokenizer_config_json.empty()) {
    nlohmann::json cfg;
    try {
      cfg = parse_json(model.tokenizer_config_json, "tokenizer_config.json");
    } catch (const JsonError&) {
      // An optional file: one that is not JSON adds no id.
    }
    if (cfg.is_object() && cfg.contains("eos_token")) {
      const auto& e = cfg["eos_token"];
      std::string text = e.is_string() ? e.get<std::string>()
                         : e.is_object() && e.contains("content") && e["content"].is_string()
                             ? e["content"].get<std::string>()
                             : "";
      if (auto id = tokenizer->token_to_id(text); !text.empty() && id) ids.push_back(*id);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace hearth
