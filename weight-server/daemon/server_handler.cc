#include "weight-server/daemon/server_handler.h"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "ipc/errors.h"
#include "ipc/kv_share_protocol.h"
#include "ipc/protocol.h"
#include "weight-server/daemon/gpu_memory_use.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth {

namespace {

using json = nlohmann::json;
using broker::Reply;
using ipc::ErrorCode;
using ipc::ProtocolError;

std::string named(const std::string& s) {
  return "'" + s + "'";
}

}  // namespace

namespace {

// The GPU of each KV device (rank r's, vmm), or none (memfd).
std::vector<int> kv_gpus(const ServeOptions& options) {
  if (options.backend != "vmm") return {};
  if (options.tensor_parallel <= 1) return {options.device};
  if (!options.devices.empty()) return options.devices;
  std::vector<int> gpus;
  for (int r = 0; r < options.tensor_parallel; ++r) gpus.push_back(r);
  return gpus;
}

KvDeviceBudgets make_budgets(const ServeOptions& options, uint64_t device_bytes, double fraction) {
  const std::vector<int> gpus = kv_gpus(options);
  const size_t devices = size_t(std::max(1, options.tensor_parallel));
  std::vector<uint64_t> bytes(devices, device_bytes);
  if (device_bytes == 0) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    for (size_t d = 0; d < devices; ++d)
      bytes[d] = !gpus.empty()           ? vmm_device_memory_bytes(gpus[d])
                 : pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page)
                                         : uint64_t(1) << 30;
  }
  return KvDeviceBudgets(bytes, fraction, gpus);
}

}  // namespace

ServerHandler::ServerHandler(ServeOptions defaults, uint64_t device_bytes, double memory_fraction)
    : defaults_(std::move(defaults)),
      budgets_(make_budgets(defaults_, device_bytes, memory_fraction)) {}

void ServerHandler::update_weights_budget() {
  // Device d holds rank d's pieces of a sharded model; a model of one rank lives on device 0.
  for (size_t d = 0; d < budgets_.size(); ++d) {
    uint64_t bytes = 0;
    for (const auto& [name, model] : models_)
      bytes += model->store->sharded() ? rank_allocation_bytes(*model->store, int(d))
                                       : (d == 0 ? model->store->allocation_bytes() : 0);
    budgets_.at(d).set_weights_bytes(bytes);
  }
}

ServerHandler::~ServerHandler() {
  finish_loads();
}

void ServerHandler::add_model(std::unique_ptr<ServedModel> model) {
  const std::string name = model->name;
  if (models_.contains(name)) throw std::runtime_error("two models are named " + named(name));
  models_.emplace(name, std::move(model));
  update_weights_budget();
}

void ServerHandler::finish_loads() {
  std::map<uint64_t, std::thread> threads;
  {
    std::lock_guard lock(loads_mutex_);
    broker_ = nullptr;
    threads.swap(loaders_);
  }
  for (auto& [id, t] : threads) t.join();
}

void ServerHandler::join_loader(uint64_t id) {
  std::thread done;
  {
    std::lock_guard lock(loads_mutex_);
    auto node = loaders_.extract(id);
    if (node.empty()) return;
    done = std::move(node.mapped());
  }
  // The thread posted this answer as its last act: it is returning, if not gone already.
  done.join();
}

size_t ServerHandler::load_threads() {
  std::lock_guard lock(loads_mutex_);
  return loaders_.size();
}

void ServerHandler::log(const std::string& line) const {
  if (defaults_.log) defaults_.log(line);
}

broker::Reply ServerHandler::handle(broker::Session& session, const ipc::Request& request) {
  const std::string& op = request.op;
  if (op == ipc::op::kList) return list();
  if (op == ipc::op::kManifest) return manifest(request);
  if (op == ipc::op::kImport) return import(session, request);
  if (op == ipc::op::kRelease) return release(session, request);
  if (op == ipc::op::kStats) return stats(session);
  if (op == ipc::op::kKvLease) return kv_lease(session, request);
  if (op == ipc::op::kKvReturn) return kv_return(session, request);
  if (op == ipc::op::kKvPublish) return kv_publish(session, request);
  if (op == ipc::op::kKvLookup) return kv_lookup(session, request);
  if (op == ipc::op::kKvUnref) return kv_unref(session, request);
  if (op == ipc::op::kKvWithdraw) return kv_withdraw(session, request);
  if (op == ipc::op::kLoad) return load(session, request);
  if (op == ipc::op::kUnload) return unload(request);
  return Reply::error(ErrorCode::kUnknownOp, "the weight server does not handle " + named(op));
}

void ServerHandler::on_connect(broker::Session& session) {
  clients_[session.id()] = Client{session.pid(), session.uid(), {}, 0, {}};
}

void ServerHandler::on_disconnect(broker::Session& session) {
  const auto it = clients_.find(session.id());
  if (it == clients_.end()) return;
  for (const std::string& model : it->second.leases)
    log("lease of client " + std::to_string(session.id()) + " (pid " +
        std::to_string(it->second.pid) + ") on " + named(model) + " ended: disconnected");
  if (!it->second.kv_chunks.empty())
    log("KV lease of client " + std::to_string(session.id()) + " (pid " +
        std::to_string(it->second.pid) + ", " + std::to_string(it->second.kv_chunks.size()) +
        " chunks) returned: disconnected");
  kv_share_.forget(session.id());
  drop_kv_chunks(session.id(), it->second);
  budgets_.forget(session.id());
  clients_.erase(it);
}

const ServedModel& ServerHandler::find(const std::string& name) const {
  const auto it = models_.find(name);
  if (it != models_.end()) return *it->second;
  if (loading_.contains(name))
    throw ProtocolError(ErrorCode::kBusy,
                        "model " + named(name) + " is still loading; try again shortly");
  std::string names;
  for (const auto& [n, _] : models_) names += (names.empty() ? "" : ", ") + n;
  throw ProtocolError(ErrorCode::kNotFound,
                      "no model named " + named(name) +
                          " is served here (serving: " + (names.empty() ? "none" : names) + ")");
}

size_t ServerHandler::lease_count(const std::string& model) const {
  size_t n = 0;
  for (const auto& [id, client] : clients_) n += client.leases.contains(model);
  return n;
}

broker::Reply ServerHandler::list() const {
  json models = json::array();
  for (const auto& [name, model] : models_) {
    json s = model->summary();
    s["leases"] = lease_count(name);
    models.push_back(std::move(s));
  }
  return Reply::ok({{"models", std::move(models)}, {"loading", json(loading_)}});
}

broker::Reply ServerHandler::manifest(const ipc::Request& request) const {
  const ServedModel& model = find(ipc::string_field(request.body, "model"));
  return Reply::ok({{"manifest", model.manifest}}, model.files.duplicates());
}

broker::Reply ServerHandler::import(broker::Session& session, const ipc::Request& request) {
  const ipc::ImportRequest req = ipc::parse_import_request(request);
  const ServedModel& model = find(req.model);
  const size_t count = model.store->allocation_count();
  std::vector<UniqueFd> fds;
  fds.reserve(req.allocations.size());
  for (uint64_t id : req.allocations) {
    if (id >= count)
      throw ProtocolError(ErrorCode::kNotFound,
                          "model " + named(req.model) + " has no allocation " + std::to_string(id) +
                              " (its ids are 0-" + std::to_string(count - 1) + ")");
    try {
      fds.push_back(model.store->export_allocation(uint32_t(id)));
    } catch (const std::exception& e) {
      throw ProtocolError(ErrorCode::kInternal, "cannot export allocation " + std::to_string(id) +
                                                    " of " + named(req.model) + ": " + e.what());
    }
  }
  Client& client = clients_[session.id()];
  if (client.leases.insert(req.model).second) ++leases_total_;
  session.set_holds_lease(true);  // the broker keeps a quiet worker that holds a lease
  ++imports_total_;
  descriptors_total_ += fds.size();
  return Reply::ok(ipc::make_import_result(req.allocations), std::move(fds));
}

broker::Reply ServerHandler::release(broker::Session& session, const ipc::Request& request) {
  const std::string& model = ipc::string_field(request.body, "model");
  const auto it = clients_.find(session.id());
  const bool released = it != clients_.end() && it->second.leases.erase(model) > 0;
  session.set_holds_lease(it != clients_.end() &&
                          (!it->second.leases.empty() || !it->second.kv_chunks.empty()));
  return Reply::ok({{"model", model}, {"released", released}});
}

broker::Reply ServerHandler::stats(broker::Session& session) const {
  json models = json::array();
  uint64_t bytes = 0, allocation_bytes = 0;
  size_t leases = 0;
  for (const auto& [name, model] : models_) {
    json s = model->summary();
    s["leases"] = lease_count(name);
    leases += lease_count(name);
    bytes += model->store->load_timings().bytes;
    allocation_bytes += model->store->allocation_bytes();
    models.push_back(std::move(s));
  }
  // Per GPU, for the vmm ranks of sharded models: weights against each device's share.
  std::vector<std::pair<std::string, const ExportableStore*>> stores;
  for (const auto& [name, model] : models_)
    if (model->store->residence() == Residence::Device)
      stores.emplace_back(name, model->store.get());
  const uint64_t fixed_bytes = defaults_.device_memory_bytes;
  const json gpus = gpu_memory_use(stores, budgets_.at(0).fraction(), [&](int device) {
    return fixed_bytes > 0 ? fixed_bytes : vmm_device_memory_bytes(device);
  });
  json workers = json::array();
  for (const auto& [id, client] : clients_) {
    if (client.leases.empty() && client.kv_chunks.empty()) continue;
    workers.push_back({{"client_id", id},
                       {"pid", client.pid},
                       {"uid", client.uid},
                       {"models", client.leases},
                       {"kv",
                        {{"chunks", client.kv_chunks.size()},
                         {"chunk_bytes", client.kv_chunk_bytes},
                         {"bytes", budgets_.held_by(id)},
                         {"devices", kv_by_device(client)}}}});
  }
  return Reply::ok(
      {{"pid", ::getpid()},
       {"uptime_s",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()},
       {"models", std::move(models)},
       {"loading", json(loading_)},
       {"bytes", bytes},
       {"allocation_bytes", allocation_bytes},
       {"clients", clients_.size()},
       {"leases", leases},
       {"workers", std::move(workers)},
       {"memory", budgets_.at(0).to_json()},  // device 0's, as before devices
       {"kv_devices", budgets_.to_json()},
       {"gpus", gpus},
       {"kv_chunks", kv_chunks_.size()},
       {"kv_chunks_total", kv_chunks_total_},
       {"kv_share", kv_share_stats()},
       {"imports_total", imports_total_},
       {"descriptors_total", descriptors_total_},
       {"leases_total", leases_total_},
       {"broker", session.broker().stats().to_json()}});
}

broker::Reply ServerHandler::load(broker::Session& session, const ipc::Request& request) {
  const std::string& dir = ipc::string_field(request.body, "dir");
  // The server's working directory means nothing to the client (hearth-ctl sends absolute
  // paths), and a path with a NUL byte cannot be opened as given.
  if (dir.empty() || dir.front() != '/' || dir.find('\0') != std::string::npos)
    throw ProtocolError(ErrorCode::kBadRequest,
                        "'dir' must be the absolute path of a model directory, not " + named(dir));
  ModelSpec spec;
  spec.dir = dir;
  spec.name = ipc::optional_string_field(request.body, "name").value_or(default_model_name(dir));
  if (!valid_model_name(spec.name))
    throw ProtocolError(ErrorCode::kBadRequest, named(spec.name) + " is not a valid model name");
  if (models_.contains(spec.name) || loading_.contains(spec.name))
    throw ProtocolError(ErrorCode::kBusy,
                        "a model named " + named(spec.name) + " is already " +
                            (loading_.contains(spec.name) ? "loading" : "served"));
  ServeOptions options = defaults_;
  options.backend = ipc::optional_string_field(request.body, "backend").value_or(defaults_.backend);
  if (options.backend != "memfd" && options.backend != "vmm")
    throw ProtocolError(ErrorCode::kBadRequest,
                        "unknown backend " + named(options.backend) + " (memfd or vmm)");
  // Per load, over the server's --quantize: "fp8" quantizes a 16-bit model's projections at
  // load, "none" serves it as its files hold it.
  if (const auto quantize = ipc::optional_string_field(request.body, "quantize")) {
    if (*quantize != "fp8" && *quantize != "none")
      throw ProtocolError(ErrorCode::kBadRequest,
                          "unknown quantize " + named(*quantize) + " (fp8 or none)");
    options.quantize_fp8 = *quantize == "fp8";
  }

  // The files are opened with the requester's rights, never the server's: a root server must
  // not read a root-only directory for an admin who cannot (requester_identity.h).
  options.open_as = Requester{session.uid(), session.gid(), session.groups()};

  loading_.insert(spec.name);
  const broker::ClientId client = session.id();
  const ipc::RequestId id = request.id;
  const uint64_t load_id = next_load_id_++;
  // Held while the thread is stored: it cannot reach its own post (which takes the lock) first.
  std::lock_guard lock(loads_mutex_);
  broker_ = &session.broker();
  loaders_.emplace(load_id,
                   std::thread(&ServerHandler::run_load, this, load_id, spec, options, client, id));
  return Reply::deferred();
}

void ServerHandler::run_load(uint64_t load_id, const ModelSpec& spec, const ServeOptions& options,
                             broker::ClientId client, ipc::RequestId id) {
  std::shared_ptr<ServedModel> model;
  std::string failure;
  try {
    model = load_served_model(spec, options);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  std::lock_guard lock(loads_mutex_);
  if (broker_ == nullptr) return;  // the server stopped while this loaded
  broker::Broker* broker = broker_;
  broker->post([this, broker, load_id, spec, model, failure, client, id] {
    join_loader(load_id);
    loading_.erase(spec.name);
    Reply reply;
    if (model) {
      json summary = model->summary();
      models_.emplace(spec.name, model);
      update_weights_budget();
      log("serving " + named(spec.name) + " (loaded by an admin request)");
      reply = Reply::ok({{"model", std::move(summary)}});
    } else {
      log("loading " + named(spec.name) + " failed: " + failure);
      reply = Reply::error(ErrorCode::kBadRequest, "cannot load " + named(spec.name) + " from " +
                                                       spec.dir.string() + ": " + failure);
    }
    broker->complete(client, id, std::move(reply));
  });
}

broker::Reply ServerHandler::unload(const ipc::Request& request) {
  const std::string& name = ipc::string_field(request.body, "model");
  find(name);  // not found / still loading
  const size_t leases = lease_count(name);
  if (leases > 0) {
    std::string pids;
    for (const auto& [id, client] : clients_)
      if (client.leases.contains(name))
        pids += (pids.empty() ? "" : ", ") + std::to_string(client.pid);
    throw ProtocolError(ErrorCode::kBusy, "model " + named(name) + " has " +
                                              std::to_string(leases) + " lease" +
                                              (leases == 1 ? "" : "s") + " (worker pids " + pids +
                                              "); unload it once they release it or disconnect");
  }
  models_.erase(name);
  update_weights_budget();
  log("unloaded " + named(name));
  return Reply::ok({{"model", name}, {"unloaded", true}});
}

broker::Reply ServerHandler::kv_lease(broker::Session& session, const ipc::Request& request) {
  const ipc::KvLeaseRequest req = ipc::parse_kv_lease_request(request);
  Client& client = clients_[session.id()];
  if (client.kv_chunk_bytes != 0 && !client.kv_chunks.empty() &&
      req.chunk_bytes != client.kv_chunk_bytes)
    throw ProtocolError(ErrorCode::kBadRequest, "chunk_bytes " + std::to_string(req.chunk_bytes) +
                                                    " differs from the chunks this client holds (" +
                                                    std::to_string(client.kv_chunk_bytes) +
                                                    "); one size per lease");
  // Rank r's KV lives beside rank r's weights, in device r's budget.
  if (req.device >= budgets_.size())
    throw ProtocolError(ErrorCode::kBadRequest, "kv_lease: device " + std::to_string(req.device) +
                                                    " is not a KV device of this server (it has " +
                                                    std::to_string(budgets_.size()) + ", 0-" +
                                                    std::to_string(budgets_.size() - 1) +
                                                    ", one per tensor-parallel rank)");
  const size_t device = size_t(req.device);
  MemoryBudget& budget = budgets_.at(device);
  const uint64_t min_bytes = req.min_chunks * req.chunk_bytes;
  uint64_t n = budget.grantable(session.id(), req.chunk_bytes, req.chunks, min_bytes);
  if (n < req.chunks) {
    // Shared blocks nobody reads give way to a worker that needs memory on their device.
    evict_shared_kv((req.chunks - n) * req.chunk_bytes, device);
    n = budget.grantable(session.id(), req.chunk_bytes, req.chunks, min_bytes);
  }
  std::vector<uint64_t> ids;
  std::vector<UniqueFd> fds;
  ids.reserve(n);
  fds.reserve(n);
  try {
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t id = next_kv_chunk_;
      const std::string name = "hearth-kv-" + std::to_string(id);
      std::unique_ptr<KvChunkMemory> memory =
          budgets_.gpu(device) >= 0 ? create_vmm_kv_chunk(budgets_.gpu(device), req.chunk_bytes)
                                    : create_memfd_kv_chunk(req.chunk_bytes, name);
      fds.push_back(memory->export_fd());
      ++next_kv_chunk_;
      kv_chunks_.emplace(id, KvChunk{session.id(), req.chunk_bytes, device, std::move(memory)});
      kv_share_.add_chunk(session.id(), id, req.chunk_bytes);
      client.kv_chunks.insert(id);
      budget.add(session.id(), req.chunk_bytes);
      ids.push_back(id);
    }
  } catch (const std::exception& e) {
    // What was created stays leased and is sent: the worker asks again later. Only a lease
    // that got nothing reports the failure.
    if (ids.empty())
      throw ProtocolError(ErrorCode::kInternal,
                          std::string("cannot create a KV chunk: ") + e.what());
    fds.resize(ids.size());
  }
  client.kv_chunk_bytes = req.chunk_bytes;
  kv_chunks_total_ += ids.size();
  session.set_holds_lease(true);
  return Reply::ok({{"chunk_bytes", req.chunk_bytes}, {"device", device}, {"chunks", ids}},
                   std::move(fds));
}

broker::Reply ServerHandler::kv_return(broker::Session& session, const ipc::Request& request) {
  const ipc::KvReturnRequest req = ipc::parse_kv_return_request(request);
  Client& client = clients_[session.id()];
  for (uint64_t id : req.chunks)
    if (!client.kv_chunks.contains(id))
      throw ProtocolError(ErrorCode::kNotFound, "this client holds no KV chunk " +
                                                    std::to_string(id) + "; nothing returned");
  for (uint64_t id : req.chunks) {
    const KvChunk& chunk = kv_chunks_.at(id);
    budgets_.at(chunk.device).remove(session.id(), chunk.bytes);
    give_up_kv_chunk(session.id(), id);
    client.kv_chunks.erase(id);
  }
  session.set_holds_lease(!client.leases.empty() || !client.kv_chunks.empty());
  return Reply::ok({{"returned", req.chunks.size()}});
}

json ServerHandler::kv_by_device(const Client& client) const {
  std::vector<std::pair<uint64_t, uint64_t>> held(budgets_.size());  // (chunks, bytes)
  for (uint64_t id : client.kv_chunks) {
    const KvChunk& chunk = kv_chunks_.at(id);
    ++held[chunk.device].first;
    held[chunk.device].second += chunk.bytes;
  }
  json out = json::array();
  for (size_t d = 0; d < held.size(); ++d)
    if (held[d].first > 0)
      out.push_back({{"device", d}, {"chunks", held[d].first}, {"bytes", held[d].second}});
  return out;
}

void ServerHandler::drop_kv_chunks(broker::ClientId id, Client& client) {
  for (uint64_t chunk : client.kv_chunks) give_up_kv_chunk(id, chunk);
  client.kv_chunks.clear();
}

}  // namespace hearth
