// What hearth-server may put on its device, and who holds what: the weights of every served
// model and each client's KV chunks, together never more than `fraction` of the device's memory
// (the GPU's, or on the CPU backend a configured size). The policy for KV: every client that
// leases is guaranteed its stated minimum (enough for one full context) whatever others take;
// the rest goes first come first served. A request the budget cannot meet gets fewer chunks,
// maybe none; it never over-commits. Pure bookkeeping: the handler creates the memory.
#pragma once

#include <cstdint>
#include <map>

#include <nlohmann/json.hpp>

namespace hearth {

class MemoryBudget {
 public:
  using ClientId = uint64_t;

  // Throws std::runtime_error unless 0 < fraction <= 1 and device_bytes > 0.
  MemoryBudget(uint64_t device_bytes, double fraction);

  uint64_t device_bytes() const { return device_bytes_; }
  double fraction() const { return fraction_; }
  uint64_t limit_bytes() const { return limit_; }
  uint64_t weights_bytes() const { return weights_; }
  uint64_t kv_bytes() const { return kv_; }
  // limit - weights - kv; 0 when the weights alone passed the limit.
  uint64_t free_bytes() const;

  void set_weights_bytes(uint64_t bytes) { weights_ = bytes; }

  // How many of `want` chunks of `chunk_bytes` `client` may take now, stating `min_bytes` as
  // its guaranteed minimum: what is free less what other clients' minimums still hold back.
  uint64_t grantable(ClientId client, uint64_t chunk_bytes, uint64_t want, uint64_t min_bytes);
  // Records chunks taken or given back.
  void add(ClientId client, uint64_t bytes);
  void remove(ClientId client, uint64_t bytes);
  // The client's connection closed: everything it held comes back.
  void forget(ClientId client);

  uint64_t held_by(ClientId client) const;
  nlohmann::json to_json() const;

 private:
  struct Holding {
    uint64_t bytes = 0;
    uint64_t minimum = 0;
  };
  // Bytes other clients' minimums keep back: what each still lacks of its own.
  uint64_t reserved_for_others(ClientId client) const;

  uint64_t device_bytes_;
  double fraction_;
  uint64_t limit_;
  uint64_t weights_ = 0;
  uint64_t kv_ = 0;
  std::map<ClientId, Holding> clients_;
};

}  // namespace hearth
