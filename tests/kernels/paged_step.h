// One step of paged attention in the kernel tests: sequences with their block tables and
// queries, laid out and run as the batched engine runs them (query starts, first positions, a
// -1-padded block table), with the pools and kernel options the test chose.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/batch_ops.h"
#include "tests/kernels/gpu_test_util.h"

namespace hearth::test {

struct PagedSeq {
  std::vector<int> blocks;  // block table
  int first_pos, n;         // this step's queries are positions [first_pos, first_pos + n)
  std::vector<float> q;     // [n][n_heads * head_dim], 16-bit values
};

// The step as the kernel reads it (and the CPU reference after it).
struct PagedStep {
  std::vector<int> starts{0}, first, table;
  std::vector<float> q;
  int max_blocks = 1, max_kv = 1;

  PagedStep() = default;
  explicit PagedStep(const std::vector<PagedSeq>& seqs) {
    for (const PagedSeq& s : seqs) max_blocks = std::max(max_blocks, int(s.blocks.size()));
    for (const PagedSeq& s : seqs) {
      starts.push_back(starts.back() + s.n);
      first.push_back(s.first_pos);
      max_kv = std::max(max_kv, s.first_pos + s.n);
      q.insert(q.end(), s.q.begin(), s.q.end());
      std::vector<int> row = s.blocks;
      row.resize(max_blocks, -1);
      table.insert(table.end(), row.begin(), row.end());
    }
  }
  int tokens() const { return starts.back(); }
  int num_seqs() const { return int(first.size()); }
};

// Runs `step` with `a`'s pools and options (k_pool, v_pool, block_stride, fp8_kv, block_size,
// n_heads, n_kv_heads, head_dim, split_kv, kernel); returns out [tokens][n_heads * head_dim] as
// 16-bit bits.
inline std::vector<uint16_t> run_paged_step(kernels::Half t, kernels::PagedAttentionArgs a,
                                            const PagedStep& step) {
  const int tokens = step.tokens(), qd = a.n_heads * a.head_dim;
  auto dq = upload_half(step.q, t);
  auto dstart = upload(step.starts), dfirst = upload(step.first), dtable = upload(step.table);
  auto out = poisoned(size_t(tokens) * qd * 2);
  const size_t scratch_bytes = kernels::paged_attention_scratch_bytes(
      tokens, step.num_seqs(), step.max_kv, a.n_heads, a.head_dim, tokens);
  DeviceBuffer scratch(scratch_bytes);
  a.q = dq.get();
  a.query_start = dstart.get<int>(), a.first_pos = dfirst.get<int>();
  a.block_table = dtable.get<int>();
  a.num_seqs = step.num_seqs(), a.num_tokens = tokens, a.max_blocks = step.max_blocks;
  a.max_kv_len = step.max_kv;
  a.scale = 1.0f / std::sqrt(float(a.head_dim));
  a.scratch = scratch.get(), a.scratch_bytes = scratch_bytes, a.out = out.get();
  kernels::paged_attention_plan(a, nullptr);
  kernels::paged_attention(t, a, nullptr);
  return download<uint16_t>(out, size_t(tokens) * qd);
}

}  // namespace hearth::test
