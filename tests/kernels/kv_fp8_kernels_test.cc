// The fp8 KV cache's kernels (issue 25, kv_cache_dtype fp8_e4m3) against CPU references on fresh
// random inputs: paged_kv_write quantizes each (token, kv head) row by the CPU engine's rule
// (worker/engine/kv_fp8.h), and paged_attention over codes and scales equals attention over the
// rows they read back as; a row's result does not depend on the step around it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "kernels/batch_ops.h"
#include "kernels/fp8_e4m3.h"
#include "kernels/reference.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/kv_write_case.h"
#include "tests/kernels/paged_step.h"
#include "worker/engine/kv_fp8.h"

namespace hearth {
namespace {

using kernels::Half;
using namespace hearth::test;

const Half kTypes[] = {Half::BF16, Half::F16};

// Keys or values as the kernels keep them with their defaults: per block the codes
// [n_kv_heads][block_size][head_dim], then the fp32 scales [n_kv_heads][block_size].
struct Fp8Pool {
  int n_kv, block_size, head_dim, blocks;
  std::vector<uint8_t> bytes;

  Fp8Pool(int n_kv_, int block_size_, int head_dim_, int blocks_)
      : n_kv(n_kv_),
        block_size(block_size_),
        head_dim(head_dim_),
        blocks(blocks_),
        bytes(size_t(blocks_) * size_t(stride()), 0) {}
  int64_t codes() const { return int64_t(n_kv) * block_size * head_dim; }
  int64_t stride() const { return codes() + int64_t(n_kv) * block_size * 4; }
  // A (kv head, offset) row's index inside its block.
  int64_t row(int kvh, int offset) const { return int64_t(kvh) * block_size + offset; }
  uint8_t* codes_of(int block, int kvh, int offset) {
    return &bytes[size_t(block * stride() + row(kvh, offset) * head_dim)];
  }
  float scale_of(int block, int kvh, int offset) const {
    float s;
    std::memcpy(&s, &bytes[size_t(block * stride() + codes() + row(kvh, offset) * 4)], 4);
    return s;
  }
  void set(int block, int kvh, int offset, const float* x) {
    const float s = kv_fp8_quantize(x, head_dim, codes_of(block, kvh, offset));
    std::memcpy(&bytes[size_t(block * stride() + codes() + row(kvh, offset) * 4)], &s, 4);
  }
  // What the kernels read: code x scale in fp32, rounded to the 16-bit type, in the reference's
  // packed float layout [blocks][n_kv][block_size][head_dim].
  std::vector<float> read(Half t) {
    std::vector<float> out(size_t(blocks) * size_t(codes()));
    for (int b = 0; b < blocks; ++b)
      for (int h = 0; h < n_kv; ++h)
        for (int o = 0; o < block_size; ++o) {
          const uint8_t* c = codes_of(b, h, o);
          const float s = scale_of(b, h, o);
          for (int d = 0; d < head_dim; ++d)
            out[size_t(b * codes() + row(h, o) * head_dim + d)] =
                from_half(to_half(kernels::decode_e4m3(c[d]) * s, t), t);
        }
    return out;
  }
};

TEST(KvFp8Codec, DeviceDecodeEqualsTheHostsForEveryCode) {
  for (int b = 0; b < 256; ++b) {
    const float host = fp8_e4m3_to_f32(uint8_t(b)), shared = kernels::decode_e4m3(uint8_t(b));
    if (std::isnan(host)) {
      EXPECT_TRUE(std::isnan(shared)) << b;
    } else {
      EXPECT_EQ(host, shared) << b;
    }
  }
}

// Every written row: its scale and codes as kv_fp8_quantize makes them from the reference's
// fp32 row (within the rounding of sincos and the head norm on the GPU), every other byte
// untouched; q as in 16-bit runs.
TEST(PagedKvWriteFp8, QuantizesEachRowAsTheCpuEngineDoes) {
  HEARTH_REQUIRE_GPU();
  const KvWriteCase cases[] = {{32, 8, 128, 9, 16, false, false},
                               {14, 2, 64, 7, 16, true, false},
                               {16, 8, 128, 3, 32, false, true}};
  for (Half t : kTypes)
    for (const KvWriteCase& c : cases) {
      const int blocks = 12;
      const KvWriteInputs in(c, blocks, 3, 0.01f);
      const std::vector<int>& slot = in.slot;
      const size_t packed = size_t(c.n_kv_heads) * c.block_size * c.head_dim;
      std::vector<float> q_ref(in.q.size()), k_ref(blocks * packed, 0.0f), v_ref(k_ref);
      in.reference(q_ref.data(), k_ref.data(), v_ref.data());
      Fp8Pool kp(c.n_kv_heads, c.block_size, c.head_dim, blocks), vp = kp;
      auto q_out = poisoned(in.q.size() * 2);
      auto dkp = upload(kp.bytes), dvp = upload(vp.bytes);
      kernels::PagedKvWriteArgs a = in.args();
      a.q_out = q_out.get(), a.k_pool = dkp.get(), a.v_pool = dvp.get(), a.fp8_kv = true;
      kernels::paged_kv_write(t, a, nullptr);
      EXPECT_LT(relative_error(download_half(q_out, in.q.size(), t), q_ref), half_tolerance(t));
      kp.bytes = download<uint8_t>(dkp, kp.bytes.size());
      vp.bytes = download<uint8_t>(dvp, vp.bytes.size());

      for (auto [pool, ref, what] : {std::tuple{&kp, &k_ref, "keys"}, {&vp, &v_ref, "values"}}) {
        Fp8Pool want(c.n_kv_heads, c.block_size, c.head_dim, blocks);
        int differing_codes = 0;
        for (int i = 0; i + 1 < c.tokens; ++i)
          for (int h = 0; h < c.n_kv_heads; ++h) {
            const int b = slot[i] / c.block_size, o = slot[i] % c.block_size;
            const float* x = &(*ref)[b * packed + (size_t(h) * c.block_size + o) * c.head_dim];
            want.set(b, h, o, x);
            const float s = pool->scale_of(b, h, o), ws = want.scale_of(b, h, o);
            EXPECT_NEAR(s, ws, 1e-5 * ws) << what << " token " << i << " head " << h;
            const uint8_t* got = pool->codes_of(b, h, o);
            for (int d = 0; d < c.head_dim; ++d) {
              // Read back within e4m3's rounding of the reference's row, plus 2e-5 of the
              // row's largest magnitude: the GPU's sincos and norm move a value across a
              // rounding midpoint at most that far (a wrong code or scale is off by far more).
              const float back = kernels::decode_e4m3(got[d]) * s;
              const float bound =
                  std::max(std::fabs(x[d]) * 0.0625f, s * 0.001f) + 2e-5f * 448.0f * s;
              EXPECT_LE(std::fabs(back - x[d]), bound) << what << " token " << i << " d " << d;
              differing_codes += got[d] != want.codes_of(b, h, o)[d];
            }
          }
        // The same codes but where the GPU's fp32 row sits on a rounding edge.
        EXPECT_LE(differing_codes, (c.tokens - 1) * c.n_kv_heads * c.head_dim / 100 + 1) << what;
        // Nothing but the written rows changed: every other row's codes and scale are zero.
        for (int b = 0; b < blocks; ++b)
          for (int h = 0; h < c.n_kv_heads; ++h)
            for (int o = 0; o < c.block_size; ++o) {
              const int s = b * c.block_size + o;
              if (std::find(slot.begin(), slot.end(), s) != slot.end()) continue;
              EXPECT_EQ(pool->scale_of(b, h, o), 0.0f) << what << " slot " << s;
              const uint8_t* got = pool->codes_of(b, h, o);
              EXPECT_TRUE(std::all_of(got, got + c.head_dim, [](uint8_t x) { return x == 0; }));
            }
      }
    }
}

using Seq = PagedSeq;

// One step of paged attention over fp8 pools; out as 16-bit bits. `step_out`: what it ran.
std::vector<uint16_t> run_step(Half t, int n_heads, const Fp8Pool& kp, const DeviceBuffer& dk,
                               const DeviceBuffer& dv, const std::vector<Seq>& seqs,
                               kernels::PagedAttentionKernel kernel, bool split_kv,
                               PagedStep* step_out = nullptr) {
  kernels::PagedAttentionArgs a;
  a.k_pool = dk.get(), a.v_pool = dv.get(), a.fp8_kv = true;
  a.block_size = kp.block_size, a.n_heads = n_heads, a.n_kv_heads = kp.n_kv;
  a.head_dim = kp.head_dim, a.split_kv = split_kv, a.kernel = kernel;
  const PagedStep step(seqs);
  if (step_out) *step_out = step;
  return run_paged_step(t, a, step);
}

TEST(PagedAttentionFp8, MatchesTheReferenceOverTheRowsTheCodesReadAs) {
  HEARTH_REQUIRE_GPU();
  struct Heads {
    int n_heads, n_kv_heads, head_dim;
  };
  for (Half t : kTypes)
    for (const Heads h : {Heads{32, 8, 128}, Heads{14, 2, 64}, Heads{4, 1, 32}})
      for (int block_size : {16, 32}) {
        const int blocks = 300;
        Fp8Pool kp(h.n_kv_heads, block_size, h.head_dim, blocks), vp = kp;
        for (int b = 0; b < blocks; ++b)
          for (int g = 0; g < h.n_kv_heads; ++g)
            for (int o = 0; o < block_size; ++o) {
              const auto k = random_floats(h.head_dim, 2), v = random_floats(h.head_dim);
              kp.set(b, g, o, k.data());
              vp.set(b, g, o, v.data());
            }
        auto dk = upload(kp.bytes), dv = upload(vp.bytes);
        std::vector<int> free(blocks);
        std::iota(free.begin(), free.end(), 0);
        std::shuffle(free.begin(), free.end(), rng());
        auto seq = [&](int first_pos, int n) {
          Seq s{{}, first_pos, n, {}};
          for (int i = 0; i < (first_pos + n + block_size - 1) / block_size; ++i) {
            s.blocks.push_back(free.back());
            free.pop_back();
          }
          s.q = rounded(random_floats(size_t(n) * h.n_heads * h.head_dim), t);
          return s;
        };
        std::vector<Seq> seqs;
        for (auto [first, n] :
             {std::pair{0, 1}, {511, 1}, {600, 1}, {0, 70}, {1000, 40}, {505, 9}, {1023, 3}})
          seqs.push_back(seq(first, n));
        PagedStep step;
        const auto got = run_step(t, h.n_heads, kp, dk, dv, seqs,
                                  kernels::PagedAttentionKernel::Auto, true, &step);
        std::vector<float> ref(step.q.size());
        const std::vector<float> k_read = kp.read(t), v_read = vp.read(t);
        reference::paged_attention(step.q.data(), k_read.data(), v_read.data(), step.starts.data(),
                                   step.first.data(), step.table.data(), step.num_seqs(),
                                   step.max_blocks, block_size, h.n_heads, h.n_kv_heads, h.head_dim,
                                   1.0f / std::sqrt(float(h.head_dim)), ref.data());
        std::vector<float> out(got.size());
        for (size_t i = 0; i < got.size(); ++i) out[i] = from_half(got[i], t);
        EXPECT_LT(relative_error(out, ref), 2 * half_tolerance(t))
            << name(t) << " d=" << h.head_dim << " block " << block_size;
        // Auto ran mma.sync (fp8 has no wgmma path): the same bits named; splits spread over
        // blocks or walked by one: the same bits.
        EXPECT_EQ(
            run_step(t, h.n_heads, kp, dk, dv, seqs, kernels::PagedAttentionKernel::MmaSync, true),
            got);
        EXPECT_EQ(
            run_step(t, h.n_heads, kp, dk, dv, seqs, kernels::PagedAttentionKernel::Auto, false),
            got);
        // One sequence alone, then last among the others: its rows are the same bits.
        const size_t qd = size_t(h.n_heads) * h.head_dim;
        const Seq& lone = seqs[4];  // 40 tokens at 1000
        const auto alone =
            run_step(t, h.n_heads, kp, dk, dv, {lone}, kernels::PagedAttentionKernel::Auto, true);
        const size_t at = size_t(step.starts[4]) * qd;
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + at))
            << name(t) << " d=" << h.head_dim;
        EXPECT_THROW(
            run_step(t, h.n_heads, kp, dk, dv, seqs, kernels::PagedAttentionKernel::Wgmma, true),
            std::invalid_argument);
      }
}

}  // namespace
}  // namespace hearth
