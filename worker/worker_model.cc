#include "worker/worker_model.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "weight-server/hf_model.h"
#include "weight-server/host_store.h"
#include "worker/tokenizer/tokenizer.h"

namespace hearth {

WorkerModel open_model_dir(const std::filesystem::path& dir) {
  auto hf = std::make_shared<const HfModel>(HfModel::open(dir));
  WorkerModel m;
  m.name = std::filesystem::absolute(dir).lexically_normal().filename().string();
  if (m.name.empty()) m.name = std::filesystem::absolute(dir).parent_path().filename().string();
  m.tokenizer_json = hf->tokenizer_json();
  m.tokenizer_config_json = hf->tokenizer_config_json();
  m.generation_config_json = hf->generation_config_json();
  m.store = std::make_shared<HostStore>(hf);
  m.source = hf;
  return m;
}

std::vector<int32_t> end_of_sequence_ids(const WorkerModel& model, const Tokenizer* tokenizer) {
  std::vector<int32_t> ids;
  for (int id : eos_token_ids(model.store->config(), model.generation_config_json)) ids.push_back(id);
  if (tokenizer && !model.tokenizer_config_json.empty()) {
    auto cfg = nlohmann::json::parse(model.tokenizer_config_json, nullptr, false);
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
