// The weight server's side of the protocol, plugged into the broker: serves models (list,
// manifest, import), counts leases (a worker holds one per model from its first import until it
// releases it or its connection ends), reports stats, and runs the admin load/unload ops.
// Loads run on their own threads and answer through Broker::post/complete, so a long upload
// never stalls the workers being served.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "broker/broker.h"
#include "broker/handler.h"
#include "weight-server/daemon/kv_device_budgets.h"
#include "weight-server/daemon/kv_share_registry.h"
#include "weight-server/daemon/served_model.h"
#include "weight-server/sharing/kv_chunk.h"

namespace hearth {

class ServerHandler final : public broker::Handler {
 public:
  // `defaults` is how admin `load` requests load (backend, device, threads, log); a request may
  // name another backend. `device_bytes` is the memory the budget divides (0: the GPU's with the
  // vmm backend, the machine's RAM with memfd); `memory_fraction` of it bounds weights and KV.
  // With defaults.tensor_parallel N > 1 there are N budgets, one per rank's device, each of
  // `device_bytes` (0: each GPU's own; with memfd the RAM, as if each rank had it to itself).
  explicit ServerHandler(ServeOptions defaults, uint64_t device_bytes = 0,
                         double memory_fraction = 0.9);
  ~ServerHandler() override;
  ServerHandler(const ServerHandler&) = delete;
  ServerHandler& operator=(const ServerHandler&) = delete;

  // Serves `model` under its name. Throws std::runtime_error if the name is taken. Call before
  // the broker runs (later, models arrive through `load`).
  void add_model(std::unique_ptr<ServedModel> model);

  // Waits for loads in progress and stops them from answering. Call after Broker::run returns
  // and before the broker is destroyed.
  void finish_loads();

  // Load threads not yet joined: those still loading, and those whose answer is on its way.
  size_t load_threads();

  broker::Reply handle(broker::Session& session, const ipc::Request& request) override;
  void on_connect(broker::Session& session) override;
  void on_disconnect(broker::Session& session) override;

 private:
  struct Client {
    pid_t pid = 0;
    uid_t uid = 0;
    std::set<std::string> leases;  // models this client holds
    uint64_t kv_chunk_bytes = 0;   // the size of its KV chunks, fixed by its first kv_lease
    std::set<uint64_t> kv_chunks;  // KV chunk ids it holds, on any device
  };
  struct KvChunk {
    broker::ClientId owner = 0;  // kSharedHolder once orphaned: kept for its published blocks
    uint64_t bytes = 0;
    size_t device = 0;  // whose budget it counts in (kv_device_budgets.h)
    std::unique_ptr<KvChunkMemory> memory;
  };

  broker::Reply list() const;
  broker::Reply manifest(const ipc::Request& request) const;
  broker::Reply import(broker::Session& session, const ipc::Request& request);
  broker::Reply release(broker::Session& session, const ipc::Request& request);
  broker::Reply stats(broker::Session& session) const;
  broker::Reply kv_lease(broker::Session& session, const ipc::Request& request);
  broker::Reply kv_return(broker::Session& session, const ipc::Request& request);
  // Drops the chunks `client` holds (its connection closed, or it returned them).
  void drop_kv_chunks(broker::ClientId id, Client& client);
  // Prefix KV shared across workers (server_kv_share.cc).
  broker::Reply kv_publish(broker::Session& session, const ipc::Request& request);
  broker::Reply kv_lookup(broker::Session& session, const ipc::Request& request);
  broker::Reply kv_unref(broker::Session& session, const ipc::Request& request);
  broker::Reply kv_withdraw(broker::Session& session, const ipc::Request& request);
  // The owner gave chunk `id` up: freed, or kept for its published blocks (its bytes then
  // count as the server's in the budget, under kSharedHolder).
  void give_up_kv_chunk(broker::ClientId owner, uint64_t id);
  // Frees orphaned chunks of `device` nobody references, least recently used first, toward
  // `bytes`.
  void evict_shared_kv(uint64_t bytes, uint64_t device);
  nlohmann::json kv_share_stats() const;
  // Each client's KV per device, for stats.
  nlohmann::json kv_by_device(const Client& client) const;
  void update_weights_budget();
  broker::Reply load(broker::Session& session, const ipc::Request& request);
  broker::Reply unload(const ipc::Request& request);

  const ServedModel& find(const std::string& name) const;
  // A load's own thread: loads, then posts the answer to the loop thread, which joins it.
  void run_load(uint64_t load_id, const ModelSpec& spec, const ServeOptions& options,
                broker::ClientId client, ipc::RequestId id);
  // Loop thread: joins the thread of load `id`, whose answer is being delivered.
  void join_loader(uint64_t id);
  size_t lease_count(const std::string& model) const;
  void log(const std::string& line) const;

  ServeOptions defaults_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::map<std::string, std::shared_ptr<const ServedModel>> models_;
  std::set<std::string> loading_;
  std::map<broker::ClientId, Client> clients_;
  uint64_t imports_total_ = 0;             // import requests answered
  uint64_t descriptors_total_ = 0;         // descriptors handed out
  uint64_t leases_total_ = 0;              // leases ever taken
  KvDeviceBudgets budgets_;                // one per KV device: rank r's is device r
  std::map<uint64_t, KvChunk> kv_chunks_;  // every leased KV chunk, by id
  uint64_t next_kv_chunk_ = 1;             // ids are never reused while the server runs
  uint64_t kv_chunks_total_ = 0;           // chunks ever leased
  // Which published blocks hold which prefix, and who reads them (issue 22 item 3). Chunks of
  // device 0 only: a tensor-parallel worker shares no prefix blocks yet.
  KvShareRegistry kv_share_;
  uint64_t kv_share_evicted_ = 0;  // orphaned chunks freed for memory
  // Broker client ids start at 1: 0 holds the budget of orphaned chunks.
  static constexpr broker::ClientId kSharedHolder = 0;

  // Load threads reach the broker through this, under the mutex, until finish_loads().
  std::mutex loads_mutex_;
  broker::Broker* broker_ = nullptr;
  // One thread per load in progress, by load id; joined when its answer is delivered, or by
  // finish_loads() when the server stops first.
  std::map<uint64_t, std::thread> loaders_;
  uint64_t next_load_id_ = 0;
};

}  // namespace hearth
