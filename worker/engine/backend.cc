#include "worker/engine/backend.h"

#include <numeric>
#include <stdexcept>

namespace hearth {

std::vector<SampleResult> Backend::sample(std::span<const SampleRequest> requests) {
  std::vector<SampleResult> results;
  results.reserve(requests.size());
  for (const SampleRequest& r : requests) {
    const std::span<const float> l = logits(r.entry);
    const SampledToken s = host_sampler_.sample(l, r.params, r.seen, r.step);
    SampleResult& out = results.emplace_back();
    out.token = s.token;
    out.logprob = s.logprob;
    if (r.top_logprobs > 0) out.top = top_logprobs(l, r.top_logprobs);
  }
  return results;
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
