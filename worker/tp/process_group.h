// The leader's side of a tensor-parallel process group (issue 26): this process is rank 0 and
// spawns one follower process per other rank (hearth-tp-follower, its channel a socketpair end
// as its stdin), says hello to each (the exchange's memfd attached), waits until each has
// loaded its pieces, then sends each forward's step plan ahead of computing it. It supervises
// the followers: a follower that dies, reports an error or does not come to an exchange in time
// makes that forward and every later one throw, naming the rank (the engine turns that into
// error events for the requests). Its destructor stops the followers and reaps them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/unique_fd.h"
#include "ipc/child_process.h"
#include "worker/engine/rank_collective.h"
#include "worker/tp/rank_channel.h"
#include "worker/tp/shared_exchange.h"

namespace hearth {

struct TpProcessOptions {
  // Empty: $HEARTH_TP_FOLLOWER, else hearth-tp-follower beside this process's executable.
  std::filesystem::path follower_binary;
  // How long a rank waits at an exchange for the others: longer than any rank's compute
  // between two exchanges (a layer's MLP over a whole prompt chunk, on a CPU).
  std::chrono::milliseconds barrier_timeout{60'000};
  // How long the followers may take to load their pieces and say ready.
  std::chrono::milliseconds start_timeout{120'000};
  size_t exchange_floats = size_t(1) << 20;  // per rank and round; larger sums go in chunks
  // GPU ranks: > 0 captures every decode bucket's graphs at start, for keys of up to this many
  // positions (as CudaTpBackend::capture_decode_graphs), so that no step pauses for one. The
  // leader runs the capture's step plans like any other, so every follower captures the same
  // buckets in the same order and their all-reduce calls pair up. 0: on a bucket's second run.
  int capture_decode_graphs = 0;
};

// GPU ranks (worker/tp/cuda_process_tp.h): rank 0's all-reduce descriptor goes with every
// hello (its share is in the hello), each follower's comes back with its ready and is imported
// by `import`, and every follower then gets the others' in a peers message.
struct TpAllReduceHandshake {
  int leader_fd = -1;
  std::function<void(int rank, const nlohmann::json& share, int fd)> import;
};

// Each follower's whole ready message, as it comes: a leased KV pool's state rides in it (CPU
// and GPU ranks alike). Throwing fails the start, as a bad ready does.
using TpReadyHook = std::function<void(int rank, const nlohmann::json& ready)>;

class TpProcessGroup final : public RankCollective {
 public:
  // `hello` is what every follower gets (its rank filled in per follower); barrier_timeout_ms
  // is taken from `options`. Throws std::runtime_error naming the rank that could not start.
  static std::shared_ptr<TpProcessGroup> start(TpHello hello, const TpProcessOptions& options,
                                               const TpAllReduceHandshake* gpu = nullptr,
                                               const TpReadyHook& ready = nullptr);
  ~TpProcessGroup() override;

  int rank() const override { return 0; }
  int world_size() const override { return exchange_.world(); }
  void begin_forward(const ForwardBatch& batch) override;
  std::string failure() const override { return failed_; }
  // check_followers() that returns the failure instead of throwing it.
  std::string probe_failure() override;
  size_t exchange_capacity() const override { return exchange_.capacity(); }
  void exchange(std::span<const float> mine,
                const std::function<void(std::span<const std::span<const float>>)>& use) override;

  pid_t follower_pid(int rank) const;
  // Throws naming a follower that died or gave up (the group is then broken for good); returns
  // while all are alive. GPU ranks call it before each step and after a failed one: their
  // all-reduce waits on the GPUs, where a dead peer is only a kernel that gives up.
  void check_followers();
  // Sends `message` to rank `rank`'s follower and returns its answer (between steps: the
  // follower is reading its channel). A follower that is gone, answers an error or nothing
  // within `timeout` breaks the group, and the error names the rank.
  nlohmann::json request(int rank, const nlohmann::json& message,
                         std::chrono::milliseconds timeout);

 private:
  struct Follower {
    int rank = 0;
    UniqueFd channel;
    std::optional<ChildProcess> process;
  };
  TpProcessGroup(SharedExchange exchange, std::chrono::milliseconds barrier_timeout);
  // Why a follower is gone ("" while all are alive): its error message, or how it ended.
  std::string dead_peer();
  std::string describe_death(Follower& f);
  [[noreturn]] void fail(const std::string& why);

  SharedExchange exchange_;
  std::chrono::milliseconds barrier_timeout_;
  std::vector<std::unique_ptr<Follower>> followers_;  // ranks 1..N-1
  std::string failed_;                                // once set, the group is broken for good
};

// hearth-tp-follower beside this executable, or $HEARTH_TP_FOLLOWER.
std::filesystem::path default_follower_binary();

}  // namespace hearth
