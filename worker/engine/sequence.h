// A request's token sequence as the scheduler sees it: every token known so far (the prompt,
// then each generated token) and how many of them have their keys and values in the cache.
// Tokens past `computed` are what the next forward passes must run: the whole prompt at first
// (in chunks if it is long), one token per step while decoding, and everything again after a
// preemption took the sequence's KV away.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/engine/kv_cache_manager.h"
#include "worker/engine/prefix_cache.h"

namespace hearth {

enum class SequenceStatus { Waiting, Running, Done };

struct Sequence {
  SequenceId id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int prompt_tokens = 0;
  int computed = 0;  // tokens[0, computed) are in the KV cache
  SequenceStatus status = SequenceStatus::Waiting;
  int preemptions = 0;
  uint64_t scheduled_step = 0;  // the scheduler's: the last step that ran this sequence
  // Held by its owner (e.g. a client that does not read its events): never scheduled, but it
  // keeps its KV blocks and its place; others go past it.
  bool held = false;

  // Prefix caching (prefix_cache.h): the root of this sequence's key chain (cache domain and
  // cache_salt) and the keys of its first full blocks, computed when first needed (tokens are
  // only ever appended, so a key once computed stays right).
  BlockKey chain_root;
  std::vector<BlockKey> block_keys;
  int cached_prompt_tokens = 0;  // prompt tokens found in the cache rather than computed
  int computed_high = 0;         // the most tokens ever computed or found (recomputes are not hits)
  // Shared across workers: the pool's free blocks when this sequence last failed admission for
  // lack of blocks (-1: it did not). Its next try asks the other workers' blocks again only once
  // more blocks are free, so a waiting sequence does not look up (and release) every step.
  int shared_retry_free = -1;
  // Found before admission (Scheduler::find_ahead, so that the lease is sized after the lookup):
  // `computed` before it (-1: no such lookup pending), and the tokens found, `shared` of them in
  // other workers' blocks. schedule() admits the sequence with them or gives them back.
  int early_from = -1, early_found = 0, early_shared = 0;

  int pending() const { return int(tokens.size()) - computed; }
  int generated() const { return int(tokens.size()) - prompt_tokens; }
};

}  // namespace hearth
