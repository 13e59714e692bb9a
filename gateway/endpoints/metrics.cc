#include "gateway/endpoints/metrics.h"

#include "gateway/http/server.h"

namespace hearth::gateway {

EngineSnapshot engine_snapshot(const nlohmann::json& stats) {
  EngineSnapshot snap;
  snap.running = stats.value("running", 0);
  snap.waiting = stats.value("waiting", 0);
  const double total = stats.value("kv_blocks_total", 0.0);
  snap.kv_usage = total > 0 ? stats.value("kv_blocks_used", 0.0) / total : 0.0;
  snap.prefix_queries = stats.value("prefix_cache_queries", int64_t(0));
  snap.prefix_hits = stats.value("prefix_cache_hits", int64_t(0));
  return snap;
}

void add_metrics_endpoints(http::Server& server, WorkerPool& pool, Metrics& metrics) {
  server.Get("/health", [](const http::Request&, http::Response& res) {
    res.set_content("{}", "application/json");
  });

  server.Get("/metrics", [&pool, &metrics](const http::Request&, http::Response& res) {
    const WorkerPoolStats w = pool.stats();
    metrics.set_workers(w.alive, w.restarts);
    for (const auto& [model, connection] : pool.connections()) {
      // A worker that has not answered an events call yet has nothing to say; one that exited
      // is not listed, and its series keep their last values.
      const nlohmann::json stats = connection->latest_stats();
      if (stats.is_object()) metrics.set_engine(model, engine_snapshot(stats));
    }
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
}

}  // namespace hearth::gateway
