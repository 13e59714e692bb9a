#include "gateway/http_gateway.h"

#include "gateway/api_key_auth.h"
#include "gateway/endpoints/chat.h"
#include "gateway/endpoints/completions.h"
#include "gateway/endpoints/generation.h"
#include "gateway/endpoints/metrics.h"
#include "gateway/endpoints/models.h"
#include "gateway/endpoints/tokenization.h"
#include "gateway/error_mapping.h"
#include "gateway/http/server.h"

namespace hearth::gateway {

namespace {

http::ServerOptions server_options(const HttpOptions& options) {
  http::ServerOptions o;
  o.max_connections = options.max_connections;
  o.limits.max_body_bytes = options.max_body_bytes;
  o.request_timeout = options.read_timeout;
  o.write_timeout = std::chrono::seconds(30);
  o.keep_alive_timeout = std::chrono::seconds(5);
  return o;
}

}  // namespace

HttpGateway::HttpGateway(HttpOptions options, const ModelCatalog& catalog, WorkerPool& pool,
                         Metrics& metrics)
    : options_(std::move(options)),
      admission_(options_.max_in_flight),
      generation_(std::make_unique<Generation>(catalog, pool, metrics, admission_,
                                               options_.request_timeout)),
      server_(std::make_unique<http::Server>(server_options(options_))) {
  http::Server& s = *server_;
  require_api_key(s, options_.api_key);
  map_errors(s);
  add_metrics_endpoints(s, pool, metrics);
  add_models_endpoint(s, catalog, pool);
  add_completions_endpoint(s, *generation_);
  add_chat_endpoint(s, *generation_);
  add_tokenization_endpoints(s, catalog);
}

HttpGateway::~HttpGateway() = default;

void HttpGateway::bind() {
  port_ = server_->bind(options_.host, options_.port);  // listens with a SOMAXCONN backlog
}

void HttpGateway::run() {
  server_->run();
}

void HttpGateway::stop() {
  server_->stop();
}

}  // namespace hearth::gateway
