#include "worker/tp/cuda_process_tp.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

#include "ipc/frame.h"
#include "kernels/cuda_check.h"
#include "kernels/device_scope.h"
#include "weight-server/model/shard_plan.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/cuda/cuda_tp_process_rank.h"
#include "worker/engine/cuda/cuda_tp_rank.h"
#include "worker/engine/cuda/decode_step_plan.h"
#include "worker/engine/cuda/device_rank_store.h"
#include "worker/engine/profile.h"
#include "worker/tp/remote_kv_memory.h"

namespace hearth {

namespace {

using kernels::DeviceScope;
using nlohmann::json;

json share_json(const AllReduceShare& s) {
  return {{"rank", s.rank},
          {"ranks", s.ranks},
          {"capacity", s.capacity},
          {"blocks", s.blocks},
          {"bytes", s.bytes}};
}

AllReduceShare parse_share(const json& m) {
  AllReduceShare s;
  try {
    s.rank = m.at("rank").get<int32_t>();
    s.ranks = m.at("ranks").get<int32_t>();
    s.capacity = m.at("capacity").get<int64_t>();
    s.blocks = m.at("blocks").get<int32_t>();
    s.bytes = m.at("bytes").get<uint64_t>();
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("tensor-parallel channel: a bad all-reduce share: ") +
                             e.what());
  }
  return s;
}

// Rank 0's pieces on its GPU, and where its KV pool comes from.
struct LeaderRank {
  ModelConfig config;  // the whole model's
  std::shared_ptr<const WeightStore> pieces;
  int device = 0;
  KvMemoryFactory lease;  // served on a vmm server: rank 0's pool leased on its GPU
};

class CudaProcessTpBackend final : public Backend {
 public:
  CudaProcessTpBackend(LeaderRank leader, const EngineOptions& options, const TpModelSource& source,
                       const TpProcessOptions& processes)
      : c_(leader.config),
        context_(resolve_context_length(options, c_)),
        cuda_graphs_(options.cuda_graphs) {
    const int n = options.tensor_parallel;
    const bool leased = bool(leader.lease);
    rank_ = std::make_unique<CudaTpProcessRank>(0, leader.device, c_, std::move(leader.pieces),
                                                options, context_, 0, leader.lease);
    TpHello hello;
    hello.world_size = n;
    if (source.server_socket.empty()) hello.model_dir = source.dir.string();
    hello.server_socket = source.server_socket;
    hello.model_name = source.model_name;
    hello.model_identity = source.identity;
    hello.quantize_fp8 = source.quantize_fp8;
    hello.context_length = context_;
    hello.kv_block_size = rank_->kv_pool().block_size;
    hello.kv_blocks = std::max(rank_->kv_pool().num_blocks, 1);
    hello.kv_cache_dtype = std::string(option_name(options.kv_cache_dtype));
    hello.backend = "cuda";
    hello.kv_leased = leased;
    // Rank 0's pool shares (the worker's kv_share): every follower's does too.
    hello.kv_shared = leased && rank_->kv_memory()->shared();
    Profile engine;
    engine.engine = options;
    hello.engine = profile_to_json(engine);
    hello.all_reduce = share_json(rank_->all_reduce().share());
    const UniqueFd mine = rank_->all_reduce().export_fd();
    const auto import = [this](int rank, const json& share, int fd) {
      const AllReduceShare s = parse_share(share);
      if (s.rank != rank)
        throw std::runtime_error("tensor-parallel rank " + std::to_string(rank) +
                                 " sent the all-reduce share of rank " + std::to_string(s.rank));
      rank_->all_reduce().import_peer(s, fd);
    };
    std::vector<TpKvState> follower_kv(static_cast<size_t>(n));
    const TpAllReduceHandshake handshake{mine.get(), import};
    group_ = TpProcessGroup::start(hello, processes, &handshake,
                                   leased ? collect_kv_states(follower_kv) : nullptr);
    if (!rank_->all_reduce().ready())
      throw std::runtime_error("tensor-parallel group: rank 0 did not get every rank's all-reduce");
    if (leased) {
      // Every rank's lease grown and shrunk together, as the in-process ranks' are: rank 0's
      // here, each follower's in its process, asked over its channel. Rank 0's is owned by its
      // pool, which outlives leased_ (reset first in the destructor).
      leased_ = join_leased_pools(std::shared_ptr<KvMemory>(rank_->kv_memory(), [](KvMemory*) {}),
                                  group_, follower_kv);
    }
    if (processes.capture_decode_graphs > 0) capture_decode_graphs(processes.capture_decode_graphs);
  }
  ~CudaProcessTpBackend() override {
    // This rank's last all-reduces finish while the followers are still there to meet them
    // (unless one is gone: then they never would); then the followers stop, then this rank goes.
    if (group_ && group_->failure().empty()) cudaStreamSynchronize(rank_->stream());
    leased_.reset();
    group_.reset();
    rank_.reset();
  }

  std::string name() const override { return "cuda"; }
  int context_length() const override { return context_; }
  int vocab_size() const override { return c_.vocab; }
  KvPoolShape kv_pool() const override {
    if (!leased_) return rank_->kv_pool();
    return leased_kv_pool(rank_->kv_pool().block_size, *leased_);
  }
  KvMemory* kv_memory() override { return leased_.get(); }
  int max_sequences() const override { return rank_->limits().max_seqs; }
  std::string failure() const override { return group_->failure(); }
  std::string probe_failure() override { return group_->probe_failure(); }

  void forward(const ForwardBatch& batch) override {
    check_batch(batch);
    group_->check_followers();  // before launching: a dead peer would hang this step's kernels
    group_->begin_forward(batch);
    guarded([&] { rank_->forward(batch); });
    host_logits_.assign(batch.entries.size(), {});
  }

  // Every decode bucket's graph, up front: the capture's steps are step plans like any other,
  // so each follower runs (and captures) exactly what rank 0 does. Its steps use block 0 of the
  // pools: nothing may be using them yet; a leased pool holding no block yet captures later.
  void capture_decode_graphs(int max_kv_len) {
    if (!cuda_graphs_ || kv_pool().num_blocks == 0) return;
    capture_every_decode_bucket(
        max_kv_len, context_, kv_pool().block_size, rank_->limits().max_step_seqs,
        [&](const ForwardBatch& batch) { forward(batch); },
        [&](int seqs, int kv_bound) { return rank_->has_graph(seqs, kv_bound); });
    guarded([&] { HEARTH_CUDA_CHECK(cudaStreamSynchronize(rank_->stream())); });
  }

  std::span<const float> logits(int entry) override {
    const std::vector<int>& rows = rank_->entry_rows();
    if (entry < 0 || entry >= int(rows.size()) || rows[size_t(entry)] < 0)
      throw std::runtime_error("batch entry " + std::to_string(entry) +
                               " has no logits: it did not ask for them in the last forward");
    std::vector<float>& host = host_logits_[size_t(entry)];
    if (host.empty()) {
      host.resize(size_t(c_.vocab));
      guarded([&] {
        DeviceScope scope(rank_->device());
        HEARTH_CUDA_CHECK(
            cudaMemcpyAsync(host.data(), rank_->logits() + size_t(rows[size_t(entry)]) * c_.vocab,
                            size_t(c_.vocab) * 4, cudaMemcpyDeviceToHost, rank_->stream()));
        HEARTH_CUDA_CHECK(cudaStreamSynchronize(rank_->stream()));
      });
    }
    return host;
  }

  std::vector<SampleResult> sample(std::span<const SampleRequest> requests) override {
    if (requests.empty()) return {};
    std::vector<SampleResult> out;
    guarded([&] {
      DeviceScope scope(rank_->device());
      rank_->token_mask().apply(requests, rank_->entry_rows(), rank_->logits(), rank_->stream());
      out =
          rank_->sampling().sample(requests, rank_->entry_rows(), rank_->logits(), rank_->stream());
    });
    return out;
  }

 private:
  // A failure on the GPU while a follower is gone is that follower's death (the all-reduce gave
  // up waiting for it): named as such.
  template <typename F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const std::exception&) {
      group_->check_followers();
      throw;
    }
  }

  ModelConfig c_;
  int context_;
  bool cuda_graphs_;
  std::unique_ptr<CudaTpProcessRank> rank_;
  std::shared_ptr<TpProcessGroup> group_;
  // Served on a vmm server: every rank's leased pool as one; null when the pools are sized here.
  std::shared_ptr<KvMemory> leased_;
  std::vector<std::vector<float>> host_logits_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_process_tp_backend(const EngineOptions& options,
                                                      const EngineWeights& weights,
                                                      const TpModelSource& source,
                                                      const TpProcessOptions& processes,
                                                      const KvMemoryFactory& kv_memory) {
  const int n = checked_gpu_ranks(options);
  LeaderRank leader;
  leader.config = weights.store->config();
  const ShardPlan plan = ShardPlan::make(leader.config, n);  // names a count that does not divide
  if (source.server_socket.empty()) {
    if (!weights.source)
      throw std::runtime_error(
          "tensor_parallel_processes with the cuda backend: the leader cuts rank 0's pieces "
          "from a model directory it opened, or imports them from a server");
    leader.pieces = upload_rank_pieces(*weights.store, plan, 0, 0);
    return std::make_unique<CudaProcessTpBackend>(std::move(leader), options, source, processes);
  }
  if (!weights.ranks.empty() || weights.source)
    throw std::runtime_error(
        "tensor_parallel_processes: the leader holds rank 0's pieces only (served: imported as "
        "rank 0), and each follower its own");
  // The server's rank 0 pieces, checked against the plan as the in-process backend checks
  // them: GPU-resident (vmm) ones run where they are and lease the pools on their GPUs; host
  // (memfd) ones are uploaded to GPU 0, and the pools sized here (memfd chunks are host memory).
  const int at = served_rank_device(*weights.store, plan, 0);
  if (at < 0) {
    DeviceScope scope(0);
    leader.pieces = std::make_shared<DeviceRankStore>(*weights.store, 0);
  } else {
    leader.pieces = weights.store;
    leader.device = at;
    leader.lease = kv_memory;
  }
  return std::make_unique<CudaProcessTpBackend>(std::move(leader), options, source, processes);
}

void serve_cuda_follower(int channel, const TpHello& hello, std::vector<UniqueFd> fds,
                         const OpenFollowerModel& open, const FollowerKvLease& kv_lease) {
  if (fds.size() != 2)
    throw std::runtime_error(
        "tensor-parallel channel: a cuda rank's hello must carry the exchange's and rank 0's "
        "all-reduce descriptors, it carried " +
        std::to_string(fds.size()));
  Profile profile;
  apply_profile_json(profile, hello.engine, "the leader's engine options");
  const EngineOptions& options = profile.engine;
  if (options.tensor_parallel != hello.world_size)
    throw std::runtime_error("tensor-parallel channel: the engine options say tensor_parallel " +
                             std::to_string(options.tensor_parallel) + ", the hello " +
                             std::to_string(hello.world_size) + " ranks");
  checked_gpu_ranks(options);
  const std::shared_ptr<const WeightStore> store = open(hello);
  const ModelConfig& whole = store->config();
  const ShardPlan plan = ShardPlan::make(whole, hello.world_size);
  std::shared_ptr<const WeightStore> pieces;
  int device = hello.device;
  KvMemoryFactory lease;
  if (hello.server_socket.empty()) {
    pieces = upload_rank_pieces(*store, plan, hello.rank, device);
  } else {
    // Served: this rank's pieces only, as the server cut them, checked against the plan.
    const int at = served_rank_device(*store, plan, hello.rank);
    if (at < 0) {
      DeviceScope scope(device);
      pieces = std::make_shared<DeviceRankStore>(*store, device);
    } else {
      pieces = store;
      device = at;
    }
    if (hello.kv_leased) {
      if (at < 0)
        throw std::runtime_error(
            "the leader leases its KV pool on a GPU, but this rank's pieces are host memory");
      // Shared when rank 0's pool shares: then every rank's does, rank by rank
      // (ranked_kv_memory.h), this one answering the leader's kv_share messages below.
      lease = kv_lease ? kv_lease(hello.kv_shared) : nullptr;
      if (!lease) throw std::runtime_error("this rank cannot lease its KV pool from the server");
    }
  }
  CudaTpProcessRank rank(hello.rank, device, whole, std::move(pieces), options,
                         hello.context_length, hello.kv_blocks, lease);
  rank.all_reduce().import_peer(parse_share(hello.all_reduce), fds[1].get());
  {
    const UniqueFd mine = rank.all_reduce().export_fd();
    const int fd = mine.get();
    json ready = ready_message(hello.rank, share_json(rank.all_reduce().share()));
    if (lease) ready["kv"] = kv_state_json(kv_state_of(*rank.kv_memory()));
    ipc::send_frame(channel, ready, std::span<const int>(&fd, 1));
  }
  std::optional<ipc::Frame> peers =
      ipc::receive_frame(channel, {.timeout = std::chrono::milliseconds(120'000)});
  if (!peers) return;  // the leader gave up on the group
  const std::vector<json> shares = parse_peers(peers->body);
  if (shares.size() != peers->fds.size() || int(shares.size()) != hello.world_size - 2)
    throw std::runtime_error("tensor-parallel channel: the peers message carried " +
                             std::to_string(shares.size()) + " shares and " +
                             std::to_string(peers->fds.size()) + " descriptors for " +
                             std::to_string(hello.world_size - 2) + " other followers");
  for (size_t i = 0; i < shares.size(); ++i)
    rank.all_reduce().import_peer(parse_share(shares[i]), peers->fds[i].get());
  for (;;) {
    std::optional<ipc::Frame> frame = ipc::receive_frame(channel);
    if (!frame) return;  // the leader is gone; nothing is left to compute for
    const std::string type = message_type(frame->body);
    if (type == "stop") {
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(rank.stream()));  // its last steps, completed
      return;
    }
    if (!frame->fds.empty())
      throw std::runtime_error("tensor-parallel channel: a \"" + type + "\" carried descriptors");
    if (type == "kv_grow" || type == "kv_shrink") {
      // Between steps: the last one's kernels are done with the blocks a shrink returns.
      if (!lease) throw std::runtime_error("a \"" + type + "\" for a pool that is not leased");
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(rank.stream()));
      ipc::send_frame(channel, answer_kv_resize(*rank.kv_memory(), frame->body));
      continue;
    }
    if (type == "kv_share") {
      // Between steps. The last one's kernels are done first: a block published is one they
      // wrote, a chunk a release unmaps is one they read.
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(rank.stream()));
      ipc::send_frame(channel, answer_kv_share(lease ? rank.kv_memory() : nullptr, frame->body));
      continue;
    }
    const StepPlan plan = parse_forward(frame->body);
    rank.forward(plan.batch);
  }
}

}  // namespace hearth
