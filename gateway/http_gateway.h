// The HTTP side of hearth-gateway: OpenAI's /v1/completions, /v1/chat/completions and
// /v1/models, vLLM's /tokenize and /detokenize, /health and /metrics, on hearth's own HTTP/1.1
// server (gateway/http/: a thread per connection, chunked responses for SSE). Requests are checked
// here, tokenized with the model's own tokenizer, and run by the worker pool; every limit answers
// with an OpenAI-shaped error.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

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
  void routes();
  int in_flight() const { return in_flight_.load(); }

  HttpOptions options_;
  const ModelCatalog& catalog_;
  WorkerPool& pool_;
  Metrics& metrics_;
  std::unique_ptr<http::Server> server_;
  int port_ = 0;
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace hearth::gateway
