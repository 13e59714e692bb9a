// paged_kv_write's launch shapes (issue 23): a block may hold one head or several, and every
// shape must give the same bits. Each case runs one block per (token, head) and then every other
// heads-per-block the case allows (and the automatic choice) on the same fresh random inputs,
// over pools of random bytes, and memcmp's q and both whole pools: bf16 and f16, fp8 KV on and
// off, head norms and biases on and off, the last token padding (slot -1).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/paged_kv_write_shape.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/kv_write_case.h"

namespace hearth {
namespace {

using kernels::Half;
using namespace hearth::test;

struct Written {
  std::vector<uint8_t> q, k, v;
};

std::vector<uint8_t> random_bytes(size_t n) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(rng()());
  return b;
}

// One launch at `heads` heads a block over pools that start as `k_init` / `v_init`.
Written run(Half t, const KvWriteInputs& in, bool fp8, int heads,
            const std::vector<uint8_t>& k_init, const std::vector<uint8_t>& v_init) {
  const size_t q_bytes = in.q.size() * 2;
  auto q_out = poisoned(q_bytes);
  auto kp = upload(k_init), vp = upload(v_init);
  kernels::PagedKvWriteArgs a = in.args();
  a.q_out = q_out.get(), a.k_pool = kp.get(), a.v_pool = vp.get();
  a.fp8_kv = fp8;
  if (heads == 0)
    kernels::paged_kv_write(t, a, nullptr);  // the automatic shape
  else
    kernels::paged_kv_write_shaped(t, a, heads, nullptr);
  return {download<uint8_t>(q_out, q_bytes), download<uint8_t>(kp, k_init.size()),
          download<uint8_t>(vp, v_init.size())};
}

bool same(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

TEST(PagedKvWriteShapes, EveryHeadsPerBlockGivesTheSameBits) {
  HEARTH_REQUIRE_GPU();
  // The 8B's heads at 1 to 256 tokens, Qwen3's head norms, biases with few kv heads, head_dim
  // 64 (one warp a head) and 256 (four), and head_dim 16 (one head a block only).
  const KvWriteCase cases[] = {
      {32, 8, 128, 1, 16, false, false}, {32, 8, 128, 2, 16, true, true},
      {32, 8, 128, 64, 16, false, true}, {32, 8, 128, 256, 16, false, false},
      {16, 8, 128, 33, 32, false, true}, {14, 2, 64, 7, 16, true, false},
      {32, 8, 64, 40, 16, true, true},   {8, 4, 256, 19, 16, true, true},
      {4, 2, 16, 5, 8, true, true},
  };
  int shapes_compared = 0;
  for (const KvWriteCase& c : cases) {
    const int blocks = c.tokens / c.block_size + 3;
    // k and v at their own scales (the fp8 rows need a spread of magnitudes).
    const KvWriteInputs in(c, blocks, 3, 0.01f);
    const int half = c.head_dim / 2, group = std::gcd(c.n_heads, c.n_kv_heads);
    for (bool fp8 : {false, true}) {
      const size_t packed = size_t(c.n_kv_heads) * c.block_size * c.head_dim;
      // 16-bit: two bytes a value; fp8: a code a value, then the block's fp32 scales.
      const size_t pool =
          blocks * (fp8 ? packed + size_t(c.n_kv_heads) * c.block_size * 4 : 2 * packed);
      const std::vector<uint8_t> k_init = random_bytes(pool), v_init = random_bytes(pool);
      for (Half t : {Half::BF16, Half::F16}) {
        const Written one = run(t, in, fp8, 1, k_init, v_init);
        // The rows were written (the reference tests check their values); one token alone is
        // the padding.
        if (c.tokens > 1) {
          ASSERT_FALSE(same(one.k, k_init)) << name(t);
        }
        std::vector<int> shapes = {0};
        for (int heads = 2; heads <= group && heads * half <= 1024; ++heads)
          if (group % heads == 0 && half % 32 == 0) shapes.push_back(heads);
        for (int heads : shapes) {
          const Written w = run(t, in, fp8, heads, k_init, v_init);
          const std::string what = std::string(name(t)) + (fp8 ? " fp8" : "") + " heads " +
                                   std::to_string(heads) + " tokens " + std::to_string(c.tokens) +
                                   " head_dim " + std::to_string(c.head_dim);
          EXPECT_TRUE(same(w.q, one.q)) << "q_out, " << what;
          EXPECT_TRUE(same(w.k, one.k)) << "k pool, " << what;
          EXPECT_TRUE(same(w.v, one.v)) << "v pool, " << what;
          shapes_compared += heads != 0;
        }
      }
    }
  }
  // Several heads a block were exercised, not just the automatic choice.
  EXPECT_GT(shapes_compared, 40);
}

// A shape that would mix q, k and v heads in a block, split a head's warps or overflow a block
// is refused before anything runs.
TEST(PagedKvWriteShapes, RefusesShapesThatWouldMixHeads) {
  int dummy[4] = {};
  kernels::PagedKvWriteArgs a;
  a.q = a.k = a.v = a.inv_freq = reinterpret_cast<const float*>(dummy);
  a.pos = a.slot = dummy;
  a.q_out = a.k_pool = a.v_pool = dummy;
  a.num_tokens = 1, a.n_heads = 32, a.n_kv_heads = 8, a.head_dim = 128, a.block_size = 16;
  for (int heads : {3, 16, -1})
    EXPECT_THROW(kernels::paged_kv_write_shaped(Half::BF16, a, heads, nullptr),
                 std::invalid_argument)
        << heads;
  a.head_dim = 1024;  // 512 threads a head: four heads would overflow a block
  EXPECT_THROW(kernels::paged_kv_write_shaped(Half::BF16, a, 4, nullptr), std::invalid_argument);
  a.head_dim = 96;  // 48 threads a head: two heads would share a warp
  EXPECT_THROW(kernels::paged_kv_write_shaped(Half::BF16, a, 2, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace hearth
