// Tensor-parallel ranks as processes on GPUs (issue 26, tensor_parallel_processes with the cuda
// backend): rank r in its own process on GPU r, each a CudaTpProcessRank. The leader (rank 0,
// this worker) cuts and uploads its pieces, sizes its KV pool, then starts the followers
// (process_group.h) with the hello naming the model, its engine options and its all-reduce
// share; each follower loads its pieces onto its GPU, builds its rank with exactly the leader's
// KV blocks and answers ready with its own share; the leader relays every share to every
// follower, and from then on sends each step plan ahead of running it. The ranks meet only on
// the GPUs, in the all-reduce (the logits too: cuda_tp_process_rank.h); rank 0 samples.
// A follower that dies is noticed before the next step is launched, or, mid-step, when the
// all-reduce gives up waiting for it: either way the error names the rank.
#pragma once

#include <memory>
#include <vector>

#include "base/unique_fd.h"
#include "worker/engine/backend.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/engine_weights.h"
#include "worker/tp/follower.h"
#include "worker/tp/rank_channel.h"
#include "worker/tp/tp_backend.h"

namespace hearth {

// The leader's backend: from a model directory (rank 0's pieces cut and uploaded here), or
// served (weights.store is rank 0's pieces as the server cut them; each follower imports its
// own; with `kv_memory` on a vmm server every rank leases its pool on its GPU). Throws naming the
// cause: fewer GPUs than ranks, pieces that are not the shard plan's, a follower that cannot
// start (naming its rank); without CUDA in this build, says so.
std::unique_ptr<Backend> make_cuda_process_tp_backend(const EngineOptions& options,
                                                      const EngineWeights& weights,
                                                      const TpModelSource& source,
                                                      const TpProcessOptions& processes,
                                                      const KvMemoryFactory& kv_memory = nullptr);

// A follower's side after a hello for backend "cuda" (`fds`: the hello's descriptors). Returns
// when the leader stops it or goes away; throws saying why it gave up.
void serve_cuda_follower(int channel, const TpHello& hello, std::vector<UniqueFd> fds,
                         const OpenFollowerModel& open, const FollowerKvLease& kv_lease = nullptr);

}  // namespace hearth
