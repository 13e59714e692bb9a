// The catalog's model a request names, or the 404 a client reads.
#pragma once

#include <string>

#include "gateway/model_catalog.h"

namespace hearth::gateway {

// `name` without its ":profile" suffix. Throws ApiError 404.
const ModelEntry& find_model(const ModelCatalog& catalog, const std::string& name);

}  // namespace hearth::gateway
