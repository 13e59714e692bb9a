// How paged_kv_write (kernels/paged_kv_write.cu) sizes its blocks: which heads-per-block a shape
// allows and which one a launch gets. Every allowed shape gives the same bits; this is about
// speed. Host code, no CUDA (CPU-tested in tests/kernels/kv_write_shape_rule_test.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace hearth::kernels::kv_write_shape {

// `heads` heads of one token in a block of heads * head_dim / 2 threads: the heads of a block
// must be of one kind (q, k or v), so `heads` divides n_heads and n_kv_heads; a block has at
// most 1,024 threads; and with several heads each head's threads are whole warps, so that its
// reductions run in the one-head block's order.
inline bool allowed(int heads, int n_heads, int n_kv_heads, int head_dim) {
  const int half = head_dim / 2;
  return heads >= 1 && std::gcd(n_heads, n_kv_heads) % heads == 0 &&
         int64_t(heads) * half <= 1024 && (heads == 1 || half % 32 == 0);
}

// The automatic shape. One 64-thread block per (token, head) made 12,288 blocks for 256 tokens of
// the 8B (48 heads), which the block scheduler hands out slower than they run. Several heads a
// block, up to 256 threads, cut that by four and still pack 8 blocks an SM (2,048 threads on
// Hopper); a grid that would no longer cover every SM keeps fewer heads a block (at 1 token of
// the 8B: one, each head on its own SM as before).
inline int automatic(int tokens, int n_heads, int n_kv_heads, int head_dim, int64_t sms) {
  const int half = head_dim / 2, all_heads = n_heads + 2 * n_kv_heads;
  for (int heads = std::max(1, 256 / std::max(half, 1)); heads > 1; --heads)
    if (allowed(heads, n_heads, n_kv_heads, head_dim) &&
        int64_t(tokens) * (all_heads / heads) >= sms)
      return heads;
  return 1;
}

}  // namespace hearth::kernels::kv_write_shape
