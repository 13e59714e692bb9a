#include "gateway/endpoints/completions.h"

#include "gateway/endpoints/generation.h"
#include "gateway/http/server.h"

namespace hearth::gateway {

void add_completions_endpoint(http::Server& server, Generation& generation) {
  server.Post("/v1/completions", [&generation](const http::Request& req, http::Response& res) {
    generation.handle(Endpoint::Completions, req, res);
  });
}

}  // namespace hearth::gateway
