// The leader <-> follower channel of a tensor-parallel process group (issue 26): a Unix
// socketpair carrying ipc frames (4-byte length + a JSON object; the exchange's memfd by
// SCM_RIGHTS with the hello). Messages, each with "type":
//   leader -> follower: hello (protocol, rank, world size, the model and engine shape; the
//     memfd attached, and rank 0's all-reduce descriptor for GPU ranks), peers (GPU ranks: the
//     other followers' all-reduce shares), forward (one step plan), kv_grow / kv_shrink (ranks
//     with leased pools, between steps), kv_share (one call on a sharing pool's SharedKv:
//     domain, find_at, release, publish, withdraw; between steps), stop;
//   follower -> leader: ready (after its pieces are loaded), kv (its leased pool after a
//     kv_grow or kv_shrink), kv_shared (the answer to a kv_share), error (why it is giving up).
// Every message is checked field by field: anything else is an error that says what was wrong.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/engine/backend.h"
#include "worker/engine/kv_memory.h"

namespace hearth {

// 2: "backend", and GPU ranks' fields; 3: GPU ranks' leased KV pools ("kv_leased", kv_grow,
// kv_shrink, kv); 4: CPU ranks' too ("kv_leased" in every hello); 5: prefix KV shared by the
// followers' pools ("kv_shared" in every hello, foreign ids in a pool's state, kv_share)
inline constexpr int kTpProtocolVersion = 5;

struct TpHello {
  int protocol = kTpProtocolVersion;
  int rank = 0, world_size = 0;
  // The model: its directory (a follower cuts its rank's pieces from it) and identity
  // (model_identity.h), which the follower checks against what it opened (single-process).
  std::string model_dir, model_identity;
  // Or served: the server's socket and the model's name there (model_dir empty); each follower
  // imports its own rank's pieces.
  std::string server_socket, model_name;
  bool quantize_fp8 = false;
  // The engine's shape on every rank: context, the KV pool's blocks (one block table serves
  // every rank), its number format.
  int context_length = 0, kv_block_size = 0, kv_blocks = 0;
  std::string kv_cache_dtype = "auto";
  int barrier_timeout_ms = 0;
  // "cpu", or "cuda" (ranks on GPUs): then the rank's GPU, the leader's engine options
  // (profile_to_json: the follower's forward must be the leader's, bit for bit) and rank 0's
  // all-reduce share (worker/tp/cuda_process_tp.h; its VMM descriptor is the hello's second).
  std::string backend = "cpu";
  int device = 0;
  nlohmann::json engine, all_reduce;
  // Ranks of a served model that lease their KV pools: each rank leases its own from the
  // server's budget of its device (GPU ranks on a vmm server: on its own GPU; CPU ranks on a
  // memfd server: device r's budget, host memory), and grows and shrinks it when the leader says
  // (kv_grow, kv_shrink). kv_blocks is then the most a pool may hold (CPU ranks) or rank 0's
  // start (GPU ranks), not a size to take.
  bool kv_leased = false;
  // A leased pool that shares prefix blocks with other workers (ranked_kv_memory.h): the
  // follower leases its pool with room for other workers' chunks and answers kv_share.
  bool kv_shared = false;
};

nlohmann::json hello_message(const TpHello& hello);
// Throws std::runtime_error naming the field (or the version) that is wrong.
TpHello parse_hello(const nlohmann::json& message);

// The follower's answer to a hello: ready, or an error (`error` set). A GPU rank's ready carries
// its all-reduce share (its descriptor attached).
nlohmann::json ready_message(int rank, const nlohmann::json& all_reduce = nullptr);
nlohmann::json error_message(const std::string& error);
// Returns normally on ready from `rank`; throws std::runtime_error with the follower's error,
// or naming what is wrong with the message.
void expect_ready(const nlohmann::json& message, int rank);

// A step plan: the tokens, positions, block tables and logits flags of one forward.
nlohmann::json forward_message(const ForwardBatch& batch);
nlohmann::json stop_message();
// GPU ranks, after every ready: the other followers' all-reduce shares, their descriptors
// attached in the same order. parse_peers throws naming what is wrong.
nlohmann::json peers_message(const std::vector<nlohmann::json>& shares);
std::vector<nlohmann::json> parse_peers(const nlohmann::json& message);

// A received step plan, owning what its ForwardBatch's spans point into.
struct StepPlan {
  std::vector<std::vector<int32_t>> tokens, tables;
  ForwardBatch batch;
};
// Throws std::runtime_error naming the field that is wrong. Ranges (token ids, positions,
// blocks) are the backend's check_batch's business, as on the leader.
StepPlan parse_forward(const nlohmann::json& message);

// A leased KV pool's state, as a follower reports it (in its ready, and answering kv_grow and
// kv_shrink).
struct TpKvState {
  int blocks = 0, max_blocks = 0, blocks_per_chunk = 0, chunks = 0;
  int64_t block_bytes = 0;
  uint64_t bytes = 0;
  // A sharing pool's foreign block ids (SharedKv); 0 blocks when it does not share.
  int foreign_first = 0, foreign_blocks = 0;
};
nlohmann::json kv_state_json(const TpKvState& state);
// Throws std::runtime_error naming the field that is wrong.
TpKvState parse_kv_state(const nlohmann::json& state);
// kv_grow (`blocks` more) or kv_shrink (keep `blocks`); the answer is {"type": "kv", ...state}.
nlohmann::json kv_resize_message(bool grow, int blocks);
// Returns the blocks a kv_grow / kv_shrink names; throws naming what is wrong.
int parse_kv_resize(const nlohmann::json& message);
// A follower's pool as it reports it.
TpKvState kv_state_of(KvMemory& memory);
// A follower's answer to a kv_grow / kv_shrink: resizes `memory` as the message says (between
// steps: nothing may be using the blocks a shrink returns) and returns {"type": "kv", ...its
// state}. Throws naming what is wrong with the message, or why the lease failed.
nlohmann::json answer_kv_resize(KvMemory& memory, const nlohmann::json& message);

// kv_share: one SharedKv call on a follower's sharing pool, between steps. The answer is
// {"type": "kv_shared"}, with "ids" (find, find_at, withdraw) or "count" (publish). A find
// message with no ids is a find(), else a find_at().
nlohmann::json kv_share_domain_message(const BlockKey& domain);
nlohmann::json kv_share_find_message(const BlockKey& root, std::span<const SharedKvLink> chain,
                                     std::span<const int32_t> ids);
nlohmann::json kv_share_release_message(std::span<const int32_t> ids);
nlohmann::json kv_share_publish_message(std::span<const SharedKvBlock> blocks);
nlohmann::json kv_share_withdraw_message(std::span<const int32_t> ids);
// A follower's answer to a kv_share: makes the call on `shared` and returns its kv_shared.
// Throws naming what is wrong with the message, or what the call threw.
nlohmann::json answer_kv_share(SharedKv& shared, const nlohmann::json& message);
// The same on a follower's pool (null when it leases none): throws when the pool does not share.
nlohmann::json answer_kv_share(KvMemory* pool, const nlohmann::json& message);
// The "ids" or "count" of a kv_shared answer; throws naming what is wrong with it.
std::vector<int32_t> parse_kv_shared_ids(const nlohmann::json& answer);
uint64_t parse_kv_shared_count(const nlohmann::json& answer);

// The message's "type", or throws naming what was received instead.
std::string message_type(const nlohmann::json& message);

}  // namespace hearth
