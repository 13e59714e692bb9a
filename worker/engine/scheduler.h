// Decides, one step at a time, which sequences run and how many of their tokens: continuous
// batching with chunked prefill and no prefill/decode phases.
//
// A step has a token budget (max_batch_tokens). Running sequences that decode (one pending
// token) go first, oldest first; then running sequences still in their prompt get chunks of
// it, oldest first, and a step that carries decodes lets prompt chunks fill it only up to
// decode_step_tokens (decodes themselves are never cut by it), so a decode step stays short
// when prompts arrive (ITL under mixed load) while a step of prompts alone gets the whole
// budget (TTFT of an idle engine); then, if nobody was preempted this step, waiting sequences are
// admitted in arrival order while the budget, max_running and the KV pool allow, each with as much
// of its prompt as the budget leaves. A sequence that will not fit waits (the queue is FIFO: nobody
// jumps it), it never fails. A held sequence (Sequence::held) is passed over wherever it is:
// running, it keeps its blocks (it may still be preempted like any other); waiting, the ones
// behind it may be admitted first. Holding changes when a sequence runs, never its tokens.
//
// When a running sequence needs a block and the pool has none, the most recently admitted
// running sequence not yet scheduled this step is preempted: its blocks are freed and it goes
// back to the front of the waiting queue, to be recomputed from its tokens later (batch-
// invariant kernels make the recomputed KV, and so its next tokens, exactly what they would
// have been). The oldest running sequence therefore always progresses, and since the engine
// admits only sequences that fit the pool on their own, every sequence finishes.
//
// With prefix caching (kv_cache_manager.h), a sequence takes the cached blocks that continue its
// prompt when it is admitted (and again when re-admitted after a preemption: its blocks stayed
// cached), and again before each later chunk of its prompt, so two requests sharing a prefix
// share its blocks as soon as one of them has computed them, while both are in flight. A
// sequence whose next block another sequence completes in this very step waits a step to find
// it rather than compute it twice: a running one skips the step, a waiting one stays at the
// head of the queue (so a burst of requests with one prompt computes the prompt once). Such a
// wait ends when that block is registered, at the end of the step.
//
// The schedule is a function of the order of add()/remove() calls and the options alone. Hits
// change only how much work a step does, never a token: a cached block holds exactly the bits a
// recomputation would write (batch- and chunk-invariant kernels, and a cache domain that keeps
// apart every option that changes numerics), so the schedule may differ with the cache on and
// off, or with what ran before, and the tokens may not.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_set>
#include <vector>

#include "worker/engine/kv_cache_manager.h"
#include "worker/engine/sequence.h"

namespace hearth {

struct SchedulerOptions {
  int max_batch_tokens = 2048;  // tokens per step, over all sequences
  int max_running = 256;        // sequences holding KV at once
  int decode_step_tokens = 0;   // tokens per step once it carries decodes; 0: max_batch_tokens
};

// `count` tokens of `seq`, from position `start` (== seq->computed when scheduled). The step's
// logits are wanted when it reaches the last known token.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int start = 0;
  int count = 0;
  bool wants_logits() const { return start + count == int(seq->tokens.size()); }
};

struct Schedule {
  std::vector<ScheduledChunk> chunks;  // decodes first, then prompt chunks
  std::vector<Sequence*> preempted;    // lost their KV this step
  int tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& options, KvCacheManager& kv);

  // Queues a new sequence at the back of the waiting queue.
  void add(Sequence& seq);
  // Takes a sequence out (finished, cancelled or failed) and frees its blocks.
  void remove(Sequence& seq);

  // Looks up the cached prefix blocks of the waiting sequences next in line for admission (as
  // many as max_running leaves room for), before the engine sizes a leased pool: blocks other
  // workers computed take nothing from the pool, so the lease need not grow for them. The
  // blocks found stay the sequence's until the next schedule() admits it or gives them back; no
  // sequence waits holding blocks past a schedule().
  void find_ahead();
  // Plans one step and allocates the KV blocks it needs. The caller runs the chunks and then
  // sets each sequence's `computed` to start + count.
  Schedule schedule();

  int running() const { return int(running_.size()); }
  int waiting() const { return int(waiting_.size()); }
  uint64_t preemptions() const { return preemptions_; }
  // Prefix caching, in tokens: brought by admitted sequences, and found in the cache.
  uint64_t prefix_cache_queries() const { return prefix_queries_; }
  uint64_t prefix_cache_hits() const { return prefix_hits_; }
  // Of those hits, tokens in blocks other workers computed (kv_cache_manager.h, sharing).
  uint64_t shared_hit_tokens() const { return shared_hits_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  // Makes room for `seq` to cover `tokens` positions, preempting as the header says. False
  // when `seq` itself had to be preempted.
  bool reserve(Sequence& seq, int tokens, uint64_t step, Schedule& out);
  void preempt(Sequence& seq, Schedule& out);
  // Gives back the blocks find_ahead() found for sequences still waiting; true if any had some.
  bool release_early();
  // After a try that lacked blocks, other workers' blocks are asked for again only once more
  // blocks are free: until then the same answer would be found and released again.
  bool may_ask_shared(const Sequence& seq) const;
  // Counts `found` tokens that `seq` took from the cache starting at position `from`, `shared`
  // of them from other workers' blocks.
  void count_hit(Sequence& seq, int from, int found, int shared);

  SchedulerOptions options_;
  KvCacheManager& kv_;
  std::vector<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;
  uint64_t preemptions_ = 0;
  uint64_t steps_ = 0;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0, shared_hits_ = 0;
};

}  // namespace hearth
