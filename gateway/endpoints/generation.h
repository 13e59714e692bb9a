// What /v1/completions and /v1/chat/completions share: admission first (a full gateway answers
// 429 before parsing or tokenizing), then the request checked and tokenized, run by the model's
// worker, and answered whole or as an SSE stream.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "gateway/admission.h"
#include "gateway/http/message.h"
#include "gateway/metrics.h"
#include "gateway/model_catalog.h"
#include "gateway/openai_request.h"
#include "gateway/worker_pool.h"

namespace hearth::gateway {

class Generation {
 public:
  Generation(const ModelCatalog& catalog, WorkerPool& pool, Metrics& metrics, Admission& admission,
             std::chrono::seconds request_timeout)
      : catalog_(catalog),
        pool_(pool),
        metrics_(metrics),
        admission_(admission),
        request_timeout_(request_timeout) {}

  // Throws ApiError for the client (mapped by error_mapping).
  void handle(Endpoint endpoint, const http::Request& req, http::Response& res);

 private:
  const ModelCatalog& catalog_;
  WorkerPool& pool_;
  Metrics& metrics_;
  Admission& admission_;
  const std::chrono::seconds request_timeout_;
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace hearth::gateway
