// The model runner: one forward pass over a batch of sequences, then sampling for the sequences
// that asked for logits. The engine decides what runs (scheduler.h) and where each sequence's
// keys and values live (kv_cache_manager.h); the backend owns the KV memory itself, a pool of
// fixed-size blocks, and the arithmetic. The CPU backend is the numerical reference; the CUDA
// backend runs the same graph on the GPU.
//
// Batch invariance is part of the contract: a sequence's logits must not depend on which other
// sequences share its batch, where it sits in the batch, or how its prompt was split into
// chunks. The CPU backend gets this by construction (every row is computed on its own, in a
// fixed order); GPU kernels must keep their reduction orders independent of the batch shape.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "worker/engine/kv_memory.h"
#include "worker/engine/logprobs.h"
#include "worker/engine/sampler.h"

namespace hearth {

// The KV pool's shape: `num_blocks` blocks of `block_size` token positions, per layer and for
// keys and values alike. Block ids run over [0, num_blocks). With prefix KV shared across
// workers (shared_kv.h), ids [foreign_first, foreign_first + foreign_blocks) name blocks other
// workers computed: a block table may hold them for positions it reads, never for positions a
// forward writes.
struct KvPoolShape {
  int block_size = 16;
  int num_blocks = 0;
  int foreign_first = 0, foreign_blocks = 0;
  bool foreign(int32_t block) const {
    return block >= foreign_first && block - foreign_first < foreign_blocks;
  }
};

// The view of a pool in `memory` (a leased one) with blocks of `block_size` positions: the blocks
// it holds now, and, when it shares prefix KV, the ids other workers' blocks are mapped at (read
// only, past the pool's own, so a backend addresses them like its own: base + id * block bytes).
KvPoolShape leased_kv_pool(int block_size, KvMemory& memory);

// One sequence's share of a forward pass.
struct ForwardEntry {
  std::span<const int32_t> tokens;  // this step's tokens (at least one)
  int start_pos = 0;                // position of tokens[0]; positions before it are cached
  // The sequence's KV blocks in position order: block_table[p / block_size] holds position p.
  // It covers at least [0, start_pos + tokens.size()).
  std::span<const int32_t> block_table;
  bool want_logits = false;  // compute logits for the last of `tokens`
};

struct ForwardBatch {
  std::vector<ForwardEntry> entries;
};

// Picks the next token of one entry of the last forward (one that wanted logits).
struct SampleRequest {
  int entry = 0;
  SamplingParams params;
  std::span<const int32_t> seen;  // the sequence's tokens so far (repetition penalty)
  uint64_t step = 0;              // which generated token this is: 0 for the first (Philox)
  int top_logprobs = 0;           // also return the N most likely tokens
  // Structured output: bit (t % 32) of allowed[t / 32] set for each token the step may pick;
  // the others' logits become kMaskedLogit before sampling (and the logprobs are of the
  // masked logits). Empty: no mask.
  std::span<const uint32_t> allowed;
};

// What a masked token's logit becomes: the lowest float, not -inf, so the samplers' check for
// overflowed (non-finite) logits still holds; exp() of it relative to any allowed logit is 0.
inline constexpr float kMaskedLogit = std::numeric_limits<float>::lowest();

// Sets every logit whose bit in `allowed` is clear to kMaskedLogit (the CPU reference of the
// CUDA mask kernel).
void apply_token_mask(std::span<float> logits, std::span<const uint32_t> allowed);

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;           // of the raw logits, as sampler.h defines it
  std::vector<TokenLogprob> top;  // top_logprobs entries, most likely first
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int context_length() const = 0;  // positions one sequence may use
  virtual int vocab_size() const = 0;
  virtual KvPoolShape kv_pool() const = 0;
  // Sequences one forward may hold; 0 when only the KV pool limits them.
  virtual int max_sequences() const { return 0; }
  // True when every position's keys and values live in the block its table names, so a block
  // one sequence computed can serve another (prefix caching).
  virtual bool paged_kv() const { return true; }
  // The memory the pool lives in when it grows and shrinks (kv_memory.h); null when the pool is
  // the backend's own, of a fixed size.
  virtual KvMemory* kv_memory() { return nullptr; }
  // True when sample() honours SampleRequest::allowed (structured output).
  virtual bool token_masks() const { return true; }

  // Runs every entry's tokens through the model, writing their keys and values into the blocks
  // their tables name (a position's slot is overwritten, so a caller may recompute it), and
  // computes logits where asked. Throws std::runtime_error naming the entry on a bad token id,
  // position or block table; nothing is guaranteed about the pool's contents after a throw.
  virtual void forward(const ForwardBatch& batch) = 0;

  // The logits of `entry` of the last forward, which must have wanted them; on the host, valid
  // until the next forward.
  virtual std::span<const float> logits(int entry) = 0;

  // One result per request, in order. The default samples on the host from logits(entry).
  virtual std::vector<SampleResult> sample(std::span<const SampleRequest> requests);

  // Device time of the last step, from the start of forward() to the end of sample()'s work
  // (events on the GPU's stream, so host time between steps is not in it); negative where the
  // backend has no such clock (the CPU). Cheap: read once the step's results are back.
  virtual double last_step_device_ms() { return -1; }

  // Why this backend can run no more forwards, "" while it can: a failure that is not one
  // batch's (a tensor-parallel rank's process died), after which a serving worker stops.
  virtual std::string failure() const { return {}; }
  // Looks, between steps, for a failure that came without a forward (a tensor-parallel
  // follower that died while the worker was idle) and returns failure(). Cheap: a serving
  // worker calls it every half second while it waits.
  virtual std::string probe_failure() { return failure(); }

 protected:
  // What forward() promises to refuse, checked against this backend's limits (context, vocab,
  // pool, max_sequences): throws std::runtime_error naming the entry.
  void check_batch(const ForwardBatch& batch) const;

 private:
  Sampler host_sampler_;
  std::vector<float> masked_;  // a masked request's logits
};

// Runs `tokens` as one sequence alone at positions [start_pos, start_pos + n), its KV in blocks
// 0, 1, 2, ... in order, and returns the last position's logits. For reference checks and
// tests (--dump-logits, golden files); it overwrites whatever those blocks held, so nothing
// else may be using the backend's pool at the time.
std::span<const float> forward_alone(Backend& backend, std::span<const int32_t> tokens,
                                     int start_pos = 0);

}  // namespace hearth
