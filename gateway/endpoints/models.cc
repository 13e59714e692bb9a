#include "gateway/endpoints/models.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "gateway/api_error.h"
#include "gateway/http/server.h"
#include "gateway/openai_request.h"

namespace hearth::gateway {

namespace {

using json = nlohmann::json;

// OpenAI's model object, with vLLM's extras (root, max_model_len).
json model_object(const ModelEntry& m, const std::string& id) {
  return json{{"id", id},
              {"object", "model"},
              {"created", m.created},
              {"owned_by", "hearth"},
              {"root", m.name},
              {"max_model_len", m.context_length}};
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A path segment as the client meant it: clients encode ':' (NAME:PROFILE) as %3A.
std::string percent_decoded(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int hi = i + 2 < s.size() ? hex_digit(s[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_digit(s[i + 2]) : -1;
    if (lo < 0) throw bad_param("model", "the path's model id has a malformed %-escape");
    out += char(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace

void add_models_endpoint(http::Server& server, const ModelCatalog& catalog,
                         const WorkerPool& pool) {
  server.Get("/v1/models", [&catalog, &pool](const http::Request&, http::Response& res) {
    json data = json::array();
    for (const std::string& name : catalog.names()) {
      const ModelEntry& m = *catalog.find(name);
      data.push_back(model_object(m, name));
      for (const std::string& profile : pool.profile_names())
        if (!profile.empty()) data.push_back(model_object(m, name + ":" + profile));
    }
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });

  // OpenAI's models.retrieve(): one entry of the list above, or 404 model_not_found.
  static const std::string kPrefix = "/v1/models/";
  server.Get(kPrefix + "*", [&catalog, &pool](const http::Request& req, http::Response& res) {
    const std::string id = percent_decoded(req.path.substr(kPrefix.size()));
    const auto [name, profile] = split_model_profile(id);
    const ModelEntry* m = catalog.find(name);
    const auto profiles = pool.profile_names();
    const bool known_profile =
        profile.empty() ? id.find(':') == std::string::npos
                        : std::find(profiles.begin(), profiles.end(), profile) != profiles.end();
    if (!m || !known_profile)
      throw ApiError(404, "invalid_request_error",
                     "the model '" + id + "' does not exist (GET /v1/models lists them)", "model")
          .with_code("model_not_found");
    res.set_content(model_object(*m, id).dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
  });
}

}  // namespace hearth::gateway
