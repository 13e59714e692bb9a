// The CPU engine's batching tests: sequences of different lengths, each cached up to a split
// point and then run among the others, in blocks scattered over one shared pool; each one's
// logits compared with the same sequence run alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "worker/engine/backend.h"

namespace hearth::test {

struct SplitSeq {
  std::vector<int32_t> tokens;
  int split = 0;  // tokens [0, split) are cached before the batch, [split, n) run in it
  std::vector<int32_t> table;
  std::vector<float> alone;  // its last logits, run alone
};

// Gives every sequence its blocks from one pool, ids shuffled by `rng`; returns the pool's size.
inline int scatter_blocks(std::vector<SplitSeq>& seqs, int block_size, std::mt19937& rng) {
  auto blocks_of = [&](const SplitSeq& s) {
    return (int(s.tokens.size()) + block_size - 1) / block_size;
  };
  int total = 0;
  for (const SplitSeq& s : seqs) total += blocks_of(s);
  std::vector<int32_t> ids(total);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (SplitSeq& s : seqs)
    for (int b = 0; b < blocks_of(s); ++b) s.table.push_back(ids[next++]);
  return total;
}

// The two steps: every sequence's cached part (no logits), then the rest (logits), entry i the
// i-th sequence. The batches point into `seqs`.
struct SplitSteps {
  ForwardBatch cached, batch;
};
inline SplitSteps split_steps(const std::vector<SplitSeq>& seqs) {
  SplitSteps out;
  for (const SplitSeq& s : seqs) {
    const std::span<const int32_t> t(s.tokens);
    if (s.split > 0) out.cached.entries.push_back({t.first(s.split), 0, s.table, false});
    out.batch.entries.push_back({t.subspan(s.split), s.split, s.table, true});
  }
  return out;
}

}  // namespace hearth::test
