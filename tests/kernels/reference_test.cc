// The CPU references of the batched kernels (kernels/reference.h), which the CPU engine will run
// too, against the single-sequence references they generalise: a paged pool with a shuffled
// block table must give exactly what a contiguous cache gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/reference.h"

namespace hearth {
namespace {

std::mt19937& gen() {
  static std::mt19937 g(std::random_device{}());
  return g;
}

std::vector<float> random_floats(size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen());
  return v;
}

TEST(BatchReferences, MatmulRowsAreGemvs) {
  const int m = 5, n = 33, k = 70, lda = 80;
  const auto a = random_floats(size_t(m) * lda), w = random_floats(size_t(n) * k);
  const auto bias = random_floats(n);
  std::vector<float> out(size_t(m) * n), with_bias(out.size());
  reference::matmul(a.data(), lda, w.data(), nullptr, m, n, k, out.data());
  reference::matmul(a.data(), lda, w.data(), bias.data(), m, n, k, with_bias.data());
  for (int i = 0; i < m; ++i) {
    const std::vector<float> x(a.begin() + i * lda, a.begin() + i * lda + k);
    const std::vector<float> row = reference::gemv(w, x, n, k);
    for (int j = 0; j < n; ++j) {
      EXPECT_EQ(out[i * n + j], row[j]);
      EXPECT_NEAR(with_bias[i * n + j], row[j] + bias[j], 1e-4);
    }
  }
}

// A paged pool holding one sequence (shuffled blocks) against the contiguous cache.
struct Paged {
  std::vector<float> k_pool, v_pool;
  std::vector<int> table;
};

Paged page(const std::vector<float>& k_cache, const std::vector<float>& v_cache, int kv_heads,
           int context, int head_dim, int block_size) {
  const int blocks = (context + block_size - 1) / block_size, pool_blocks = blocks + 3;
  std::vector<int> order(pool_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), gen());
  Paged p;
  p.table.assign(order.begin(), order.begin() + blocks);
  const size_t pool = size_t(pool_blocks) * kv_heads * block_size * head_dim;
  p.k_pool = random_floats(pool);  // unused rows hold noise, never read
  p.v_pool = random_floats(pool);
  for (int pos = 0; pos < context; ++pos)
    for (int h = 0; h < kv_heads; ++h) {
      const size_t src = (size_t(h) * context + pos) * head_dim;
      const size_t dst =
          ((size_t(p.table[pos / block_size]) * kv_heads + h) * block_size + pos % block_size) *
          head_dim;
      std::copy_n(&k_cache[src], head_dim, &p.k_pool[dst]);
      std::copy_n(&v_cache[src], head_dim, &p.v_pool[dst]);
    }
  return p;
}

TEST(BatchReferences, PagedAttentionEqualsContiguousAttention) {
  const int n_heads = 8, kv_heads = 2, head_dim = 16, context = 77, block_size = 16;
  const auto k_cache = random_floats(size_t(kv_heads) * context * head_dim);
  const auto v_cache = random_floats(k_cache.size());
  const Paged p = page(k_cache, v_cache, kv_heads, context, head_dim, block_size);
  // A chunk of 9 queries at positions 60..68 as one sequence, and a decode at 76 as another.
  const auto q = random_floats(size_t(10) * n_heads * head_dim);
  const std::vector<int> starts{0, 9, 10}, first{60, 76};
  std::vector<int> table = p.table;
  table.insert(table.end(), p.table.begin(), p.table.end());
  std::vector<float> out(q.size());
  const float scale = 0.25f;
  reference::paged_attention(q.data(), p.k_pool.data(), p.v_pool.data(), starts.data(),
                             first.data(), table.data(), 2, int(p.table.size()), block_size,
                             n_heads, kv_heads, head_dim, scale, out.data());
  const std::vector<float> chunk(q.begin(), q.begin() + 9 * n_heads * head_dim);
  const std::vector<float> decode(q.begin() + 9 * n_heads * head_dim, q.end());
  auto want = reference::attention(chunk, k_cache, v_cache, 60, 9, n_heads, kv_heads, head_dim,
                                   context, scale);
  const auto want_decode = reference::attention(decode, k_cache, v_cache, 76, 1, n_heads, kv_heads,
                                                head_dim, context, scale);
  want.insert(want.end(), want_decode.begin(), want_decode.end());
  EXPECT_EQ(out, want);
}

// The same blocks laid out block-major (a block holds 3 layers' keys then values; the pool is
// read as layer 2 through block_stride): the same bits as the packed pools.
TEST(BatchReferences, PagedAttentionWithBlockStrideEqualsPacked) {
  const int n_heads = 8, kv_heads = 2, head_dim = 16, context = 77, block_size = 16, layers = 3;
  const auto k_cache = random_floats(size_t(kv_heads) * context * head_dim);
  const auto v_cache = random_floats(k_cache.size());
  const Paged p = page(k_cache, v_cache, kv_heads, context, head_dim, block_size);
  const size_t packed = size_t(kv_heads) * block_size * head_dim;
  const size_t blocks = p.k_pool.size() / packed, stride = 2 * layers * packed;
  std::vector<float> pool = random_floats(blocks * stride);  // other layers hold noise
  const size_t k_at = 2 * (layers - 1) * packed, v_at = k_at + packed;
  for (size_t b = 0; b < blocks; ++b) {
    std::copy_n(&p.k_pool[b * packed], packed, &pool[b * stride + k_at]);
    std::copy_n(&p.v_pool[b * packed], packed, &pool[b * stride + v_at]);
  }
  const auto q = random_floats(size_t(5) * n_heads * head_dim);
  const std::vector<int> starts{0, 5}, first{70};
  std::vector<float> want(q.size()), got(q.size());
  reference::paged_attention(q.data(), p.k_pool.data(), p.v_pool.data(), starts.data(),
                             first.data(), p.table.data(), 1, int(p.table.size()), block_size,
                             n_heads, kv_heads, head_dim, 0.25f, want.data());
  reference::paged_attention(q.data(), pool.data() + k_at, pool.data() + v_at, starts.data(),
                             first.data(), p.table.data(), 1, int(p.table.size()), block_size,
                             n_heads, kv_heads, head_dim, 0.25f, got.data(), int64_t(stride));
  EXPECT_EQ(got, want);
}

TEST(BatchReferences, PagedKvWriteEqualsQkvRope) {
  const int n_heads = 4, kv_heads = 2, head_dim = 8, tokens = 6, context = 40, block_size = 4;
  const int qd = n_heads * head_dim, kvd = kv_heads * head_dim;
  const auto q = random_floats(size_t(tokens) * qd), k = random_floats(size_t(tokens) * kvd),
             v = random_floats(size_t(tokens) * kvd);
  const auto bq = random_floats(qd), bk = random_floats(kvd), bv = random_floats(kvd);
  const auto qn = random_floats(head_dim), kn = random_floats(head_dim);
  std::vector<float> inv(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / head_dim);
  const int start = 30;
  std::vector<float> k_cache(size_t(kv_heads) * context * head_dim, 0.0f), v_cache = k_cache;
  const auto want = reference::qkv_rope(q, k, v, bq, bk, bv, qn, kn, inv, start, tokens, n_heads,
                                        kv_heads, head_dim, context, 1e-6f, k_cache, v_cache);
  // Positions start.. in blocks 9, 2, 5 ...; the last token is padding.
  const std::vector<int> table{9, 2, 5, 7, 0, 1, 3, 4, 6, 8};
  std::vector<int> pos(tokens), slot(tokens);
  for (int t = 0; t < tokens; ++t) {
    pos[t] = start + t;
    slot[t] = table[pos[t] / block_size] * block_size + pos[t] % block_size;
  }
  slot[tokens - 1] = -1;
  std::vector<float> q_out(q.size()), k_pool(size_t(10) * kv_heads * block_size * head_dim, 0.0f),
      v_pool = k_pool;
  reference::paged_kv_write(q.data(), k.data(), v.data(), bq.data(), bk.data(), bv.data(),
                            qn.data(), kn.data(), inv.data(), pos.data(), slot.data(), tokens,
                            n_heads, kv_heads, head_dim, block_size, 1e-6f, q_out.data(),
                            k_pool.data(), v_pool.data());
  EXPECT_EQ(q_out, want.q_out);
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < kv_heads; ++h) {
      const size_t cache = (size_t(h) * context + pos[t]) * head_dim;
      const size_t paged =
          ((size_t(table[pos[t] / block_size]) * kv_heads + h) * block_size + pos[t] % block_size) *
          head_dim;
      for (int i = 0; i < head_dim; ++i) {
        if (slot[t] < 0) {
          EXPECT_EQ(k_pool[paged + i], 0.0f) << "padding wrote its k row";
        } else {
          EXPECT_EQ(k_pool[paged + i], k_cache[cache + i]);
          EXPECT_EQ(v_pool[paged + i], v_cache[cache + i]);
        }
      }
    }
}

}  // namespace
}  // namespace hearth
