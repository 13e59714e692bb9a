// vLLM's POST /tokenize and /detokenize: the bodies checked, then the model's own tokenizer (and
// chat template, for messages). No worker is involved.
#pragma once

#include "gateway/model_catalog.h"

namespace hearth::http {
class Server;
}

namespace hearth::gateway {

void add_tokenization_endpoints(http::Server& server, const ModelCatalog& catalog);

}  // namespace hearth::gateway
