#include "worker/engine/backend.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace hearth {

KvPoolShape leased_kv_pool(int block_size, KvMemory& memory) {
  KvPoolShape shape{block_size, memory.blocks()};
  if (const SharedKv* shared = memory.shared()) {
    shape.foreign_first = shared->first_foreign_block();
    shape.foreign_blocks = shared->foreign_capacity();
  }
  return shape;
}

std::vector<SampleResult> Backend::sample(std::span<const SampleRequest> requests) {
  std::vector<SampleResult> results;
  results.reserve(requests.size());
  for (const SampleRequest& r : requests) {
    std::span<const float> l = logits(r.entry);
    if (!r.allowed.empty()) {
      masked_.assign(l.begin(), l.end());
      apply_token_mask(masked_, r.allowed);
      l = masked_;
    }
    const SampledToken s = host_sampler_.sample(l, r.params, r.seen, r.step);
    SampleResult& out = results.emplace_back();
    out.token = s.token;
    out.logprob = s.logprob;
    if (r.top_logprobs > 0) out.top = top_logprobs(l, r.top_logprobs);
  }
  return results;
}

void apply_token_mask(std::span<float> logits, std::span<const uint32_t> allowed) {
  for (size_t t = 0; t < logits.size(); ++t)
    if (t / 32 >= allowed.size() || !(allowed[t / 32] >> (t % 32) & 1u)) logits[t] = kMaskedLogit;
}

void Backend::check_batch(const ForwardBatch& batch) const {
  if (batch.entries.empty()) throw std::runtime_error("forward needs at least one sequence");
  const int max_seqs = max_sequences(), context = context_length(), vocab = vocab_size();
  const KvPoolShape kv = kv_pool();
  if (max_seqs > 0 && int64_t(batch.entries.size()) > max_seqs)
    throw std::runtime_error("a forward of " + std::to_string(batch.entries.size()) +
                             " sequences exceeds max_running (" + std::to_string(max_seqs) + ")");
  for (size_t e = 0; e < batch.entries.size(); ++e) {
    const ForwardEntry& entry = batch.entries[e];
    const std::string where = "batch entry " + std::to_string(e) + ": ";
    const int n = int(entry.tokens.size());
    if (n == 0) throw std::runtime_error(where + "forward needs at least one token");
    if (entry.start_pos < 0 || int64_t(entry.start_pos) + n > context)
      throw std::runtime_error(where + "context length " + std::to_string(context) +
                               " exceeded: " + std::to_string(int64_t(entry.start_pos) + n) +
                               " positions requested");
    for (int32_t t : entry.tokens)
      if (t < 0 || t >= vocab)
        throw std::runtime_error(where + "token id " + std::to_string(t) +
                                 " is outside the vocabulary (" + std::to_string(vocab) + ")");
    const int64_t blocks = (int64_t(entry.start_pos) + n + kv.block_size - 1) / kv.block_size;
    if (int64_t(entry.block_table.size()) < blocks)
      throw std::runtime_error(where + "its block table has " +
                               std::to_string(entry.block_table.size()) + " blocks, " +
                               std::to_string(blocks) + " are needed");
    // Blocks from the first one this forward writes on are the engine's own; those before may
    // be other workers' (read-only).
    const int64_t first_written = entry.start_pos / kv.block_size;
    for (int64_t b = 0; b < blocks; ++b) {
      const int32_t block = entry.block_table[b];
      if (b < first_written && kv.foreign(block)) continue;
      if (block < 0 || block >= kv.num_blocks)
        throw std::runtime_error(where + "KV block " + std::to_string(block) +
                                 " is outside the pool of " + std::to_string(kv.num_blocks) +
                                 (kv.foreign(block) ? " (another worker's, read-only)" : ""));
    }
  }
}

std::span<const float> forward_alone(Backend& backend, std::span<const int32_t> tokens,
                                     int start_pos) {
  if (start_pos < 0)
    throw std::runtime_error("negative start position " + std::to_string(start_pos));
  const KvPoolShape kv = backend.kv_pool();
  const int64_t positions = int64_t(start_pos) + int64_t(tokens.size());
  const int64_t blocks = (positions + kv.block_size - 1) / kv.block_size;
  if (blocks > kv.num_blocks)
    throw std::runtime_error(std::to_string(positions) + " positions need " +
                             std::to_string(blocks) + " KV blocks, the pool has " +
                             std::to_string(kv.num_blocks));
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  ForwardBatch batch;
  batch.entries.push_back({tokens, start_pos, table, true});
  backend.forward(batch);
  return backend.logits(0);
}

}  // namespace hearth
