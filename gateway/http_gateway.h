// The HTTP side of hearth-gateway: OpenAI's /v1/completions, /v1/chat/completions and
// /v1/models, vLLM's /tokenize and /detokenize, /health and /metrics, on hearth's own HTTP/1.1
// server (gateway/http/: a thread per connection, chunked responses for SSE). This class only
// wires them: each endpoint lives in gateway/endpoints/, the API key check in api_key_auth,
// the OpenAI-shaped errors in error_mapping, the in-flight limit in admission.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "gateway/admission.h"
#include "gateway/metrics.h"
#include "gateway/model_catalog.h"
#include "gateway/worker_pool.h"

namespace hearth::http {
class Server;
}

namespace hearth::gateway {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::optional<std::string> api_key;  // Authorization: Bearer KEY on /v1, /tokenize, /detokenize
  size_t max_body_bytes = 16u << 20;   // 413 above
  int max_connections = 512;           // handler threads; connections beyond wait in the backlog
  int max_in_flight = 1024;            // requests admitted at once; 429 + Retry-After beyond
  std::chrono::seconds read_timeout{15};      // a whole request (head and body) must arrive in it
  std::chrono::seconds request_timeout{600};  // a generation running longer is cancelled (504)
};

class Generation;

class HttpGateway {
 public:
  HttpGateway(HttpOptions options, const ModelCatalog& catalog, WorkerPool& pool, Metrics& metrics);
  ~HttpGateway();

  // Binds; throws std::runtime_error when the address is taken or invalid. port 0 picks one.
  void bind();
  int port() const { return port_; }
  // Serves until stop() (from another thread or a signal handler's helper thread).
  void run();
  void stop();

 private:
  HttpOptions options_;
  Admission admission_;  // before the server: a stream still running holds a place in it
  std::unique_ptr<Generation> generation_;
  std::unique_ptr<http::Server> server_;
  int port_ = 0;
};

}  // namespace hearth::gateway
