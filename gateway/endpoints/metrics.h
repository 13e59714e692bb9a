// GET /metrics (Prometheus text) and GET /health. A scrape sends nothing to any worker: it reads
// the engine stats each worker pushed with its last events reply (WorkerConnection keeps them),
// so a busy, wedged or stopped worker cannot hold a scrape up.
#pragma once

#include <nlohmann/json.hpp>

#include "gateway/metrics.h"
#include "gateway/worker_pool.h"

namespace hearth::http {
class Server;
}

namespace hearth::gateway {

// What the metrics take from a worker's stats object.
EngineSnapshot engine_snapshot(const nlohmann::json& stats);

void add_metrics_endpoints(http::Server& server, WorkerPool& pool, Metrics& metrics);

}  // namespace hearth::gateway
