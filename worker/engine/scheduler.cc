#include "worker/engine/scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hearth {

Scheduler::Scheduler(const SchedulerOptions& options, KvCacheManager& kv)
    : options_(options), kv_(kv) {
  if (options_.max_batch_tokens < 1)
    throw std::runtime_error("max_batch_tokens must be at least 1, got " +
                             std::to_string(options_.max_batch_tokens));
  if (options_.decode_step_tokens < 0)
    throw std::runtime_error("decode_step_tokens must be at least 0, got " +
                             std::to_string(options_.decode_step_tokens));
  if (options_.max_running < 1)
    throw std::runtime_error("max_running must be at least 1, got " +
                             std::to_string(options_.max_running));
}

void Scheduler::add(Sequence& seq) {
  seq.status = SequenceStatus::Waiting;
  waiting_.push_back(&seq);
}

void Scheduler::remove(Sequence& seq) {
  if (auto it = std::find(running_.begin(), running_.end(), &seq); it != running_.end())
    running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), &seq); it != waiting_.end())
    waiting_.erase(it);
  kv_.free(seq.id);
  seq.status = SequenceStatus::Done;
}

void Scheduler::preempt(Sequence& seq, Schedule& out) {
  running_.erase(std::find(running_.begin(), running_.end(), &seq));
  kv_.free(seq.id);
  seq.computed = 0;
  seq.status = SequenceStatus::Waiting;
  ++seq.preemptions;
  ++preemptions_;
  // Victims are taken newest first, so the oldest of them ends up first in the queue.
  waiting_.push_front(&seq);
  out.preempted.push_back(&seq);
}

bool Scheduler::release_early() {
  bool any = false;
  for (Sequence* seq : waiting_) {
    if (seq->early_from < 0) continue;
    kv_.free(seq->id);  // they stay cached
    seq->computed = seq->early_from;
    seq->early_from = -1;
    any = true;
  }
  return any;
}

bool Scheduler::reserve(Sequence& seq, int tokens, uint64_t step, Schedule& out) {
  while (!kv_.allocate(seq.id, tokens)) {
    // Cached blocks find_ahead() took for waiting sequences go back before anyone is preempted.
    if (release_early()) continue;
    // `seq` itself is running and not yet scheduled, so there always is a victim.
    auto victim = std::find_if(running_.rbegin(), running_.rend(),
                               [&](const Sequence* s) { return s->scheduled_step != step; });
    Sequence& v = **victim;
    preempt(v, out);
    if (&v == &seq) return false;
  }
  return true;
}

void Scheduler::count_hit(Sequence& seq, int from, int found, int shared) {
  prefix_hits_ += uint64_t(found);
  shared_hits_ += uint64_t(shared);
  // Prompt positions found before this request ever computed them (not a recompute's).
  const int first = std::max(from, seq.computed_high);
  seq.cached_prompt_tokens += std::max(0, std::min(from + found, seq.prompt_tokens) - first);
  seq.computed_high = std::max(seq.computed_high, from + found);
}

bool Scheduler::may_ask_shared(const Sequence& seq) const {
  return seq.shared_retry_free < 0 || kv_.pool().free() > seq.shared_retry_free;
}

void Scheduler::find_ahead() {
  int room = options_.max_running - int(running_.size());
  for (Sequence* seq : waiting_) {
    if (room <= 0) break;
    if (seq->held) continue;
    --room;
    if (seq->early_from >= 0) continue;
    if (!may_ask_shared(*seq)) continue;
    seq->early_from = seq->computed;
    seq->early_found = kv_.reuse_cached_blocks(*seq, &seq->early_shared);
  }
}

Schedule Scheduler::schedule() {
  Schedule out;
  const uint64_t step = ++steps_;
  int budget = options_.max_batch_tokens;
  // Prefix caching: the keys of the blocks this step's chunks complete.
  std::unordered_set<BlockKey, BlockKeyHash> completing;
  const int block_size = kv_.block_size();
  auto waits_for_block = [&](Sequence& seq) {
    const int j = kv_.next_lookup_block(seq);
    return j >= 0 && completing.contains(kv_.block_key(seq, j));
  };
  auto take = [&](Sequence& seq, int count) {
    if (kv_.prefix_caching())
      for (int j = seq.computed / block_size; (j + 1) * block_size <= seq.computed + count; ++j)
        completing.insert(kv_.block_key(seq, j));
    out.chunks.push_back({&seq, seq.computed, count});
    seq.scheduled_step = step;
    seq.computed_high = std::max(seq.computed_high, seq.computed + count);
    out.tokens += count;
    budget -= count;
  };

  // Running sequences: decodes first, then the prompts still being prefilled, each in
  // admission order. Iterate over a copy: preemption takes sequences out of running_.
  const std::vector<Sequence*> running = running_;
  for (const bool decodes : {true, false}) {
    for (Sequence* seq : running) {
      if (budget == 0) break;
      if (seq->status != SequenceStatus::Running || seq->scheduled_step == step) continue;
      if (seq->held) continue;
      if ((seq->pending() == 1) != decodes) continue;
      if (!decodes) {
        const int from = seq->computed;
        int shared = 0;
        const int found = kv_.reuse_cached_blocks(*seq, &shared);
        count_hit(*seq, from, found, shared);
        if (waits_for_block(*seq)) continue;
      }
      const int count = std::min(seq->pending(), budget);
      if (reserve(*seq, seq->computed + count, step, out)) take(*seq, count);
    }
    // Prompt chunks beside decodes fill the step only up to decode_step_tokens.
    if (decodes && out.tokens > 0 && options_.decode_step_tokens > 0)
      budget = std::min(budget, std::max(0, options_.decode_step_tokens - out.tokens));
  }

  // New (and preempted) sequences, in queue order, while everything allows; held ones are
  // passed over. A step that had to preempt admits nobody: the pool is full.
  for (auto it = waiting_.begin(); out.preempted.empty() && budget > 0 && it != waiting_.end() &&
                                   int(running_.size()) < options_.max_running;) {
    Sequence& seq = **it;
    if (seq.held) {
      ++it;
      continue;
    }
    // A lookup find_ahead() made this step counts as this one's (the server is not asked twice).
    const bool early = seq.early_from >= 0;
    const int from = early ? seq.early_from : seq.computed;
    const int brought = int(seq.tokens.size()) - from;
    int shared = 0;
    const bool ask_shared = !early && may_ask_shared(seq);
    int found = kv_.reuse_cached_blocks(seq, &shared, ask_shared);
    if (early) {
      found += seq.early_found;
      shared += seq.early_shared;
      seq.early_from = -1;
    }
    const int count = std::min(seq.pending(), budget);
    const bool waits = waits_for_block(seq);
    if (waits || !kv_.allocate(seq.id, seq.computed + count)) {
      kv_.free(seq.id);  // the blocks it found stay cached for its next try
      seq.computed = from;
      if (!waits) seq.shared_retry_free = kv_.pool().free();
      break;
    }
    seq.shared_retry_free = -1;
    if (kv_.prefix_caching()) prefix_queries_ += uint64_t(brought);
    count_hit(seq, from, found, shared);
    it = waiting_.erase(it);
    running_.push_back(&seq);
    seq.status = SequenceStatus::Running;
    take(seq, count);
  }
  // Those find_ahead() found blocks for but not admitted give them back.
  release_early();
  return out;
}

}  // namespace hearth
