// The engine: many requests in flight on one backend. The caller submits requests, cancels
// them, and drives the engine by calling step() on one thread; each step runs one scheduler
// step (scheduler.h) as one forward pass, samples the next token of every sequence that
// reached the end of what it knows, and reports per request what happened: new tokens with
// their text, and a final output when a request ends (eos, length, a stop string, cancelled,
// or an error). There are no threads inside and no I/O: the worker process, a test or a
// server loop owns both.
//
// A request's tokens do not depend on what else runs: sampling is seeded per request and
// counted per generated token, and the backends are batch-invariant (backend.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "worker/engine/backend.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/kv_cache_manager.h"
#include "worker/engine/request.h"
#include "worker/engine/request_output.h"
#include "worker/engine/scheduler.h"

namespace hearth {

class Tokenizer;
namespace structured {
class Grammar;
class GrammarCache;
}  // namespace structured

struct EngineStats {
  int running = 0, waiting = 0;
  int kv_blocks_used = 0, kv_blocks_total = 0, kv_block_size = 0;
  uint64_t steps = 0;
  int last_step_sequences = 0, last_step_tokens = 0;  // the last step's batch
  uint64_t forwarded_tokens = 0;  // tokens run through the model (prompts, decodes, recomputes)
  uint64_t generated_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t finished = 0;   // requests ended for any reason
  uint64_t cancelled = 0;  // of those, ended by cancel()
  int held = 0;            // live requests held now (hold())
  // Prefix caching: tokens admitted sequences brought (queries) and found cached (hits), full
  // blocks cached now (held or free), and cached blocks evicted for reuse so far.
  uint64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  int prefix_cache_blocks = 0;
  uint64_t prefix_cache_evicted_blocks = 0;
  // Served mode, a pool leased from the server (kv_memory.h): chunks and bytes held now, and
  // how often it grew and shrank; kv_lease false for a pool of the engine's own.
  bool kv_lease = false;
  int kv_lease_chunks = 0;
  uint64_t kv_lease_bytes = 0;
  uint64_t kv_lease_grows = 0, kv_lease_shrinks = 0;
  // Blocks the grows asked for: what the live sequences lacked after their prefix lookups.
  uint64_t kv_lease_asked_blocks = 0;
  // Prefix KV shared across workers (kv_share; kv_cache_manager.h): whether this engine
  // shares, blocks and tokens found in blocks other workers computed, own blocks published.
  bool kv_share = false;
  uint64_t kv_share_hit_blocks = 0, kv_share_hit_tokens = 0, kv_share_published_blocks = 0;
  uint64_t kv_share_lookups = 0;  // lookups asked of the server (each a round trip)
};

class Engine {
 public:
  // `backend` must outlive the engine, which is then its KV pool's only user. `tokenizer` may be
  // null: token ids only, and stop strings never match. A request ends when it samples one of
  // `eos_ids` (unless it sets ignore_eos). `model_identity` names the weights' exact bits (the
  // worker's: e.g. the manifest's checksums) for the prefix cache's domain (cache_domain.h).
  Engine(Backend& backend, const EngineOptions& options, const Tokenizer* tokenizer,
         std::vector<int32_t> eos_ids, std::string_view model_identity = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Checks and queues a request. Throws RequestError naming the request and the field for a
  // duplicate live id, an empty prompt, a token outside the vocabulary, a setting out of range,
  // prompt + max_tokens beyond the context length, or more KV than the whole pool holds; the
  // engine and its other requests are unaffected.
  void submit(Request request);
  // Compiles a structured-output request's grammar into the engine's cache, so submit() finds
  // it: safe to call from another thread than the engine's (a serving worker's request reader),
  // at most once per request before its submit(). A spec that does not compile is left for
  // submit() to refuse.
  void prepare(const Request& request);

  // Ends a live request at once, freeing its KV blocks; its final output (reason cancelled)
  // comes with the next step(). False when no live request has this id.
  bool cancel(const std::string& id);
  // The same, but the request ends with reason error and `error` as its message (e.g. "the
  // worker is shutting down").
  bool fail(const std::string& id, const std::string& error);
  // Holds a live request (`held`) or lets it run again: a held request is not scheduled but
  // keeps its KV blocks, so holding delays its tokens without changing them (e.g. while its
  // client is not reading). False when no live request has this id.
  bool hold(const std::string& id, bool held);
  // The ids of every live request, in no particular order.
  std::vector<std::string> live_ids() const;

  // One scheduler step. Returns the outputs of requests that changed: finishes left by cancel()
  // first, then the step's sequences in schedule order. A backend failure ends the requests of
  // the failed step with reason error; the others carry on.
  std::vector<RequestOutput> step();

  // True while any request is live or an output is still to be returned.
  bool has_work() const;
  // True when step() can do something: an output to return or a live request not held.
  bool can_step() const;
  EngineStats stats() const;
  // The backend's failure (Backend::failure): "" while it can run forwards.
  std::string backend_failure() const { return backend_.failure(); }
  // Backend::probe_failure: also notices a failure that came between steps.
  std::string probe_backend() { return backend_.probe_failure(); }
  int max_running() const { return scheduler_.options().max_running; }
  bool prefix_caching() const { return kv_.prefix_caching(); }
  // Forgets the cached blocks no request holds (e.g. before a memory check); tokens are
  // unaffected, later requests only find less.
  void drop_prefix_cache() { kv_.drop_unused_cached_blocks(); }

 private:
  struct Live;
  using Clock = std::chrono::steady_clock;

  void finish(Live& live, FinishReason reason, std::string error, RequestOutput& out);
  void emit_token(Live& live, const SampleResult& sampled, RequestOutput& out);
  std::vector<RequestOutput> fail_step(std::span<const SequenceId> sequences,
                                       const std::string& error);
  // A leased pool: asks for the blocks the live sequences lack, at most every
  // kGrowRetry after an answer of none; a provider that fails ends the requests that wait.
  void grow_kv();
  // A leased pool with no live request gives back every chunk past one full context.
  void shrink_kv();
  // The compiled grammar of a structured-output request; throws RequestError naming its field.
  std::shared_ptr<const structured::Grammar> grammar_for(const Request& request);

  Backend& backend_;
  KvMemory* memory_;  // the backend's, when its pool is leased
  Clock::time_point next_grow_ = {};
  const Tokenizer* tokenizer_;
  std::vector<int32_t> eos_ids_;
  KvCacheManager kv_;
  Scheduler scheduler_;
  std::unordered_map<std::string, std::unique_ptr<Live>> live_;
  std::unordered_map<SequenceId, Live*> by_sequence_;  // the scheduled ones
  std::vector<RequestOutput> pending_;                 // finishes to return with the next step
  BlockKey cache_domain_;
  SequenceId next_sequence_ = 1;
  int held_ = 0;
  EngineStats counters_;
  // Made with the first structured request, on whichever thread prepares or submits it.
  structured::GrammarCache& grammars();
  std::once_flag grammars_made_;
  std::unique_ptr<structured::GrammarCache> grammars_;
};

}  // namespace hearth
