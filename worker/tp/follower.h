// A follower of a tensor-parallel process group (issue 26): one rank in a process of its own,
// started by the leader (process_group.h) with its end of the channel. It reads the hello,
// maps the exchange, loads its rank's pieces, says ready, then runs every step plan the leader
// sends through a CPU backend of its rank alone, until the leader says stop or goes away. Served,
// with "kv_leased" in the hello, its KV pool is leased from the server's budget of its rank's
// device, its state in the ready, and grows and shrinks when the leader says (kv_grow,
// kv_shrink); GPU ranks run the same way on their GPU (cuda_process_tp.h).
#pragma once

#include <functional>
#include <memory>

#include "base/unique_fd.h"
#include "weight-server/model/weight_store.h"
#include "worker/engine/kv_memory.h"
#include "worker/tp/rank_channel.h"

namespace hearth {

// Opens the model the hello names (the whole store: the backend cuts its rank's pieces from
// it); throws std::runtime_error when it is not the leader's (its identity differs).
using OpenFollowerModel = std::function<std::shared_ptr<const WeightStore>(const TpHello&)>;
// Served (after the model is opened): the factory this rank leases its KV pool through from the
// server it imported from (worker/leased_kv_factory.h: on a vmm server on its GPU, on a memfd
// server into host memory), its pools sharing prefix blocks with other workers when `share`
// (the hello's kv_shared); null where it cannot lease.
using FollowerKvLease = std::function<KvMemoryFactory(bool share)>;

// Serves one rank on `channel`. Returns when the leader stops it or closes the channel; throws
// std::runtime_error saying why it gave up (a bad hello, a model it cannot open, a failed step,
// a peer lost at an exchange), having told the leader first where the channel still works.
void run_tp_follower(UniqueFd channel, const OpenFollowerModel& open,
                     const FollowerKvLease& kv_lease = nullptr);

}  // namespace hearth
