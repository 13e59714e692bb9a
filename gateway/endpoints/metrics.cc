#include "gateway/endpoints/metrics.h"

#include "gateway/http/server.h"

namespace hearth::gateway {

EngineSnapshot engine_snapshot(const nlohmann::json& stats) {
  EngineSnapshot snap;
  snap.running = stats.value("running", 0);
  snap.waiting = stats.value("waiting", 0);
  snap.kv_blocks_used = stats.value("kv_blocks_used", int64_t(0));
  snap.kv_blocks_total = stats.value("kv_blocks_total", int64_t(0));
  snap.kv_block_size = stats.value("kv_block_size", int64_t(0));
  snap.prefix_queries = stats.value("prefix_cache_queries", int64_t(0));
  snap.prefix_hits = stats.value("prefix_cache_hits", int64_t(0));
  snap.preemptions = stats.value("preemptions", int64_t(0));
  // The worker's prefix KV sharing counters (0 from a worker without sharing).
  snap.kv_share_hit_tokens = stats.value("kv_share_hit_tokens", int64_t(0));
  snap.kv_share_hit_blocks = stats.value("kv_share_hit_blocks", int64_t(0));
  snap.kv_share_published_blocks = stats.value("kv_share_published_blocks", int64_t(0));
  // Step counts of another bucket layout (a worker of another build) are left out, not misread.
  if (const auto it = stats.find("iteration_tokens"); it != stats.end() && it->is_object()) {
    const nlohmann::json& counts = it->value("counts", nlohmann::json());
    if (counts.is_array() && counts.size() == snap.iteration_tokens.counts.size()) {
      for (size_t i = 0; i < counts.size(); ++i)
        snap.iteration_tokens.counts[i] =
            counts[i].is_number_unsigned() ? counts[i].get<uint64_t>() : 0;
      snap.iteration_tokens.sum = it->value("sum", uint64_t(0));
    }
  }
  return snap;
}

void add_metrics_endpoints(http::Server& server, WorkerPool& pool, Metrics& metrics) {
  server.Get("/health", [](const http::Request&, http::Response& res) {
    res.set_content("{}", "application/json");
  });

  server.Get("/metrics", [&pool, &metrics](const http::Request&, http::Response& res) {
    const WorkerPoolStats w = pool.stats();
    metrics.set_workers(w.alive, w.restarts);
    std::vector<WorkerReport> reports;
    for (const LiveWorker& worker : pool.connections()) {
      // A worker that has not answered an events call yet has nothing to say.
      const nlohmann::json stats = worker.connection->latest_stats();
      if (stats.is_object())
        reports.push_back(
            {worker.model, worker.profile, worker.generation, engine_snapshot(stats)});
    }
    metrics.set_engines(reports);
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
}

}  // namespace hearth::gateway
