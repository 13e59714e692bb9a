#include "worker/tp/follower.h"

#include <poll.h>

#include <stdexcept>
#include <string>

#include "ipc/frame.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/ranked_kv_memory.h"
#include "worker/tp/cuda_process_tp.h"
#include "worker/tp/shared_exchange.h"

namespace hearth {

namespace {

using nlohmann::json;

// The follower's view of the group: the plan came from the leader already, so begin_forward
// has nothing to do; the exchange watches the leader's end of the channel.
class FollowerGroup final : public RankCollective {
 public:
  FollowerGroup(SharedExchange exchange, int channel, std::chrono::milliseconds timeout)
      : exchange_(std::move(exchange)), channel_(channel), timeout_(timeout) {}
  int rank() const override { return exchange_.rank(); }
  int world_size() const override { return exchange_.world(); }
  void begin_forward(const ForwardBatch&) override {}
  size_t exchange_capacity() const override { return exchange_.capacity(); }
  void exchange(std::span<const float> mine,
                const std::function<void(std::span<const std::span<const float>>)>& use) override {
    exchange_.exchange(mine, use, timeout_, [this]() -> std::string {
      // The next plan may already be waiting (POLLIN); only a hang-up means the leader is gone.
      pollfd p{channel_, POLLRDHUP, 0};
      if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return "the tensor-parallel leader (rank 0) is gone";
      return "";
    });
  }

 private:
  SharedExchange exchange_;
  int channel_;
  std::chrono::milliseconds timeout_;
};

void serve(int channel, const OpenFollowerModel& open, const FollowerKvLease& kv_lease) {
  std::optional<ipc::Frame> hello_frame =
      ipc::receive_frame(channel, {.timeout = std::chrono::milliseconds(60'000)});
  if (!hello_frame)
    throw std::runtime_error("tensor-parallel channel: the leader closed it before its hello");
  const TpHello hello = parse_hello(hello_frame->body);
  if (hello.backend == "cuda")
    return serve_cuda_follower(channel, hello, std::move(hello_frame->fds), open, kv_lease);
  if (hello_frame->fds.size() != 1)
    throw std::runtime_error(
        "tensor-parallel channel: the hello must carry the exchange's "
        "descriptor, it carried " +
        std::to_string(hello_frame->fds.size()));
  const std::optional<KvCacheDtype> kv_dtype = parse_option<KvCacheDtype>(hello.kv_cache_dtype);
  if (!kv_dtype)
    throw std::runtime_error("tensor-parallel channel: kv_cache_dtype \"" + hello.kv_cache_dtype +
                             "\" is not one of " + option_choices<KvCacheDtype>());
  auto group = std::make_shared<FollowerGroup>(
      SharedExchange::attach(std::move(hello_frame->fds[0]), hello.world_size, hello.rank), channel,
      std::chrono::milliseconds(hello.barrier_timeout_ms));
  const std::shared_ptr<const WeightStore> store = open(hello);
  // Served, the store is this rank's pieces; from a directory, the backend cuts them.
  std::vector<std::shared_ptr<const WeightStore>> own;
  if (!hello.server_socket.empty()) own.push_back(store);
  const KvPoolShape kv{hello.kv_block_size, hello.kv_blocks};
  // Leased (served): this rank's pool from its device's budget on the server, the same size of
  // block as the leader's rank 0 pool (this rank's heads of a block) and the same limits: at
  // most kv_blocks, at least one context.
  std::shared_ptr<KvMemory> memory;
  if (hello.kv_leased) {
    const KvMemoryFactory lease = kv_lease ? kv_lease(hello.kv_shared) : nullptr;
    if (!lease) throw std::runtime_error("this rank cannot lease its KV pool from the server");
    const RankLease shape =
        rank_lease(CpuBackend::kv_bytes_per_token(store->config(), *kv_dtype), hello.world_size,
                   hello.kv_block_size, hello.kv_blocks, hello.context_length);
    memory = lease(shape.block_bytes, shape.max_blocks, shape.min_blocks, hello.rank);
  }
  CpuBackend backend(store, hello.context_length, kv, memory, hello.world_size, std::move(own),
                     *kv_dtype, group);
  json ready = ready_message(hello.rank);
  if (memory) ready["kv"] = kv_state_json(kv_state_of(*memory));
  ipc::send_frame(channel, ready);
  for (;;) {
    std::optional<ipc::Frame> frame = ipc::receive_frame(channel);
    if (!frame) return;  // the leader is gone; nothing is left to compute for
    const std::string type = message_type(frame->body);
    if (type == "stop") return;
    if (!frame->fds.empty())
      throw std::runtime_error("tensor-parallel channel: a \"" + type + "\" carried descriptors");
    if (type == "kv_grow" || type == "kv_shrink") {
      // Between steps (this rank's last forward has returned): no block is in use here.
      if (!memory) throw std::runtime_error("a \"" + type + "\" for a pool that is not leased");
      ipc::send_frame(channel, answer_kv_resize(*memory, frame->body));
      continue;
    }
    if (type == "kv_share") {
      // Between steps too: a block is published only once the step that wrote it returned.
      ipc::send_frame(channel, answer_kv_share(memory.get(), frame->body));
      continue;
    }
    const StepPlan plan = parse_forward(frame->body);
    backend.forward(plan.batch);
  }
}

}  // namespace

void run_tp_follower(UniqueFd channel, const OpenFollowerModel& open,
                     const FollowerKvLease& kv_lease) {
  try {
    serve(channel.get(), open, kv_lease);
  } catch (const std::exception& e) {
    try {
      ipc::send_frame(channel.get(), error_message(e.what()));
    } catch (const std::exception&) {
      // The leader is gone: nobody to tell.
    }
    throw;
  }
}

}  // namespace hearth
