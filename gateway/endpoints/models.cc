#include "gateway/endpoints/models.h"

#include <nlohmann/json.hpp>

#include "gateway/http/server.h"

namespace hearth::gateway {

void add_models_endpoint(http::Server& server, const ModelCatalog& catalog,
                         const WorkerPool& pool) {
  server.Get("/v1/models", [&catalog, &pool](const http::Request&, http::Response& res) {
    using json = nlohmann::json;
    json data = json::array();
    for (const std::string& name : catalog.names()) {
      const ModelEntry& m = *catalog.find(name);
      auto entry = [&](const std::string& id) {
        return json{{"id", id},
                    {"object", "model"},
                    {"created", m.created},
                    {"owned_by", "hearth"},
                    {"root", name},
                    {"max_model_len", m.context_length}};
      };
      data.push_back(entry(name));
      for (const std::string& profile : pool.profile_names())
        if (!profile.empty()) data.push_back(entry(name + ":" + profile));
    }
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });
}

}  // namespace hearth::gateway
