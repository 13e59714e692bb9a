#include "gateway/endpoints/find_model.h"

#include "gateway/api_error.h"

namespace hearth::gateway {

const ModelEntry& find_model(const ModelCatalog& catalog, const std::string& name) {
  const ModelEntry* m = catalog.find(name);
  if (!m)
    throw ApiError(404, "invalid_request_error",
                   "the model '" + name + "' does not exist (GET /v1/models lists them)", "model")
        .with_code("model_not_found");
  return *m;
}

}  // namespace hearth::gateway
