// GET /v1/models: every catalog model, and one entry per engine profile ("model:profile");
// GET /v1/models/{id}: one of them (OpenAI's models.retrieve), or 404 model_not_found.
#pragma once

#include "gateway/model_catalog.h"
#include "gateway/worker_pool.h"

namespace hearth::http {
class Server;
}

namespace hearth::gateway {

void add_models_endpoint(http::Server& server, const ModelCatalog& catalog, const WorkerPool& pool);

}  // namespace hearth::gateway
