// The continuous-batching kernels (kernels/batch_ops.h): each against its CPU reference on
// fresh random inputs, and the batch-invariance promise proven with memcmp: a row's result is
// the same bits whatever the step holds (its size, the row's place, the tile shapes, how a
// prompt was chunked, which blocks hold the cache, what else is sampled).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>

#include "kernels/batch_ops.h"
#include "kernels/reference.h"
#include "kernels/wgmma_matmul.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/kv_write_case.h"
#include "tests/kernels/paged_step.h"
#include "worker/engine/logprobs.h"
#include "worker/engine/sampler.h"

namespace hearth {
namespace {

using kernels::Half;
using kernels::MatmulEpilogue;
using kernels::MatmulTiles;
using namespace hearth::test;

const Half kTypes[] = {Half::BF16, Half::F16};
const MatmulTiles kAllTiles[] = {MatmulTiles::Auto, MatmulTiles::Skinny, MatmulTiles::Medium,
                                 MatmulTiles::Large};

const char* tiles_name(MatmulTiles t) {
  switch (t) {
    case MatmulTiles::Auto:
      return "auto";
    case MatmulTiles::Skinny:
      return "skinny";
    case MatmulTiles::Medium:
      return "medium";
    default:
      return "large";
  }
}

using test::download;

// ---- Matmul ----

// The matmul tests run twice: through batch_matmul (the wgmma kernel on Hopper) and through
// batch_matmul_mma (the mma.sync fallback, which batch_matmul no longer reaches there).
bool g_mma = false;

size_t workspace_bytes(int m, int n, int k, MatmulTiles tiles) {
  return g_mma ? kernels::batch_matmul_mma_workspace_bytes(m, n, k, tiles)
               : kernels::batch_matmul_workspace_bytes(m, n, k, tiles, /*swiglu=*/true);
}

// Runs one matmul; `out` must already hold the residual for AccumulateF32.
void run_matmul(Half t, MatmulEpilogue e, const DeviceBuffer& a, const DeviceBuffer& w,
                const DeviceBuffer* w_up, const DeviceBuffer* bias, int m, int n, int k,
                MatmulTiles tiles, DeviceBuffer& out, DeviceBuffer& workspace) {
  kernels::MatmulArgs args;
  args.a = a.get(), args.w = w.get(), args.w_up = w_up ? w_up->get() : nullptr;
  args.bias = bias ? bias->get<float>() : nullptr;
  args.m = m, args.n = n, args.k = k, args.out = out.get(), args.tiles = tiles;
  args.workspace = workspace.get(), args.workspace_bytes = workspace.bytes();
  if (g_mma)
    kernels::batch_matmul_mma(t, e, args, nullptr);
  else
    kernels::batch_matmul(t, e, args, nullptr);
}

DeviceBuffer zeroed(size_t bytes) {
  DeviceBuffer b(bytes);
  HEARTH_CUDA_CHECK(cudaMemset(b.get(), 0, bytes));
  return b;
}

void check_matmul_reference() {
  struct Shape {
    int m, n, k;
  };
  // Odd M and N, one weight whose K is cut into slices (1024 x 2048), tiny and wide shapes.
  const Shape shapes[] = {
      {1, 64, 64}, {7, 1000, 512}, {33, 1024, 2048}, {100, 200, 1024}, {300, 520, 256}};
  for (Half t : kTypes)
    for (const Shape& s : shapes) {
      const float ws = 1.0f / std::sqrt(float(s.k));
      auto a = rounded(random_floats(size_t(s.m) * s.k), t);
      auto wg = rounded(random_floats(size_t(s.n) * s.k, ws), t);
      auto wu = rounded(random_floats(size_t(s.n) * s.k, ws), t);
      auto bias = random_floats(s.n);
      auto residual = random_floats(size_t(s.m) * s.n);
      std::vector<float> gate(size_t(s.m) * s.n), up(gate.size()), biased(gate.size());
      reference::matmul(a.data(), s.k, wg.data(), nullptr, s.m, s.n, s.k, gate.data());
      reference::matmul(a.data(), s.k, wu.data(), nullptr, s.m, s.n, s.k, up.data());
      reference::matmul(a.data(), s.k, wg.data(), bias.data(), s.m, s.n, s.k, biased.data());
      std::vector<float> act(gate.size()), accumulated(gate.size());
      for (size_t i = 0; i < gate.size(); ++i) {
        act[i] = reference::silu(gate[i]) * up[i];
        accumulated[i] = residual[i] + biased[i];
      }
      auto da = upload_half(a, t), dwg = upload_half(wg, t), dwu = upload_half(wu, t);
      auto dbias = upload(bias);
      const size_t count = size_t(s.m) * s.n;
      for (MatmulTiles tiles : kAllTiles) {
        auto workspace = zeroed(workspace_bytes(s.m, s.n, s.k, tiles));
        const std::string where = std::string(name(t)) + " " + tiles_name(tiles) + " " +
                                  std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                  std::to_string(s.k);
        // fp32 outputs of exact 16-bit inputs: only the fp32 accumulation's rounding.
        auto out = poisoned(count * 4);
        run_matmul(t, MatmulEpilogue::StoreF32, da, dwg, nullptr, nullptr, s.m, s.n, s.k, tiles,
                   out, workspace);
        EXPECT_LT(relative_error(download_f32(out, count), gate), 1e-4) << where;
        auto acc = upload(residual);
        run_matmul(t, MatmulEpilogue::AccumulateF32, da, dwg, nullptr, &dbias, s.m, s.n, s.k, tiles,
                   acc, workspace);
        EXPECT_LT(relative_error(download_f32(acc, count), accumulated), 1e-4) << where;
        auto half = poisoned(count * 2);
        run_matmul(t, MatmulEpilogue::StoreHalf, da, dwg, nullptr, &dbias, s.m, s.n, s.k, tiles,
                   half, workspace);
        EXPECT_LT(relative_error(download_half(half, count, t), biased), half_tolerance(t))
            << where;
        auto swiglu = poisoned(count * 2);
        run_matmul(t, MatmulEpilogue::SwiGLU, da, dwg, &dwu, nullptr, s.m, s.n, s.k, tiles, swiglu,
                   workspace);
        EXPECT_LT(relative_error(download_half(swiglu, count, t), act), half_tolerance(t)) << where;
      }
    }
}

// The same rows computed in batches of 1 .. 2048, at different places and with every tile
// shape, give the same bits as in one batch of 2048.
void check_matmul_invariance() {
  struct Weight {
    int n, k;
    MatmulEpilogue epilogue;
  };
  // 1024 x 4096: the 8B k/v projection, its K cut into 4 slices; 768 x 512: one slice.
  const Weight weights[] = {{1024, 4096, MatmulEpilogue::StoreF32},
                            {768, 512, MatmulEpilogue::AccumulateF32},
                            {512, 1024, MatmulEpilogue::SwiGLU},
                            {1000, 256, MatmulEpilogue::StoreHalf}};
  const int pool = 2048;
  for (Half t : kTypes)
    for (const Weight& w : weights) {
      const bool swiglu = w.epilogue == MatmulEpilogue::SwiGLU;
      const size_t out_elem =
          w.epilogue == MatmulEpilogue::StoreF32 || w.epilogue == MatmulEpilogue::AccumulateF32 ? 4
                                                                                                : 2;
      const size_t row_bytes = size_t(w.n) * out_elem;
      auto rows = rounded(random_floats(size_t(pool) * w.k), t);
      auto residual = random_floats(size_t(pool) * w.n);
      auto dw = upload_half(rounded(random_floats(size_t(w.n) * w.k, 0.05f), t), t);
      auto dwu = upload_half(rounded(random_floats(size_t(w.n) * w.k, 0.05f), t), t);
      auto workspace = zeroed(workspace_bytes(pool, w.n, w.k, MatmulTiles::Skinny));
      // Rows `order` of the pool as one batch; returns the output bytes per batch row.
      auto run = [&](const std::vector<int>& order, MatmulTiles tiles) {
        const int m = int(order.size());
        std::vector<float> a(size_t(m) * w.k), base(size_t(m) * w.n);
        for (int i = 0; i < m; ++i) {
          std::copy_n(&rows[size_t(order[i]) * w.k], w.k, &a[size_t(i) * w.k]);
          std::copy_n(&residual[size_t(order[i]) * w.n], w.n, &base[size_t(i) * w.n]);
        }
        auto da = upload_half(a, t);
        DeviceBuffer out =
            w.epilogue == MatmulEpilogue::AccumulateF32 ? upload(base) : poisoned(m * row_bytes);
        run_matmul(t, w.epilogue, da, dw, swiglu ? &dwu : nullptr, nullptr, m, w.n, w.k, tiles, out,
                   workspace);
        return download<uint8_t>(out, m * row_bytes);
      };
      std::vector<int> all(pool);
      std::iota(all.begin(), all.end(), 0);
      const std::vector<uint8_t> want = run(all, MatmulTiles::Auto);
      for (int m : {1, 2, 7, 32, 100, 2048})
        for (MatmulTiles tiles : kAllTiles) {
          // A different place for every row: a shifted, reversed run of the pool.
          std::vector<int> order(m);
          const int shift = int(rng()() % pool);
          for (int i = 0; i < m; ++i) order[i] = (shift + pool - i) % pool;
          const std::vector<uint8_t> got = run(order, tiles);
          int differing = 0;
          for (int i = 0; i < m; ++i)
            differing += std::memcmp(&got[size_t(i) * row_bytes],
                                     &want[size_t(order[i]) * row_bytes], row_bytes) != 0;
          EXPECT_EQ(differing, 0) << name(t) << " " << w.n << "x" << w.k << " m=" << m << " "
                                  << tiles_name(tiles) << ": rows differ from the 2048-row batch";
        }
    }
}

TEST(BatchMatmul, MatchesReferenceForEveryEpilogueAndTileShape) {
  HEARTH_REQUIRE_GPU();
  g_mma = false;
  check_matmul_reference();
}

TEST(BatchMatmul, RowsAreBitIdenticalWhateverTheBatch) {
  HEARTH_REQUIRE_GPU();
  g_mma = false;
  check_matmul_invariance();
}

TEST(BatchMatmul, MmaFallbackMatchesReferenceForEveryEpilogueAndTileShape) {
  HEARTH_REQUIRE_GPU();
  g_mma = true;
  check_matmul_reference();
  g_mma = false;
}

TEST(BatchMatmul, MmaFallbackRowsAreBitIdenticalWhateverTheBatch) {
  HEARTH_REQUIRE_GPU();
  g_mma = true;
  check_matmul_invariance();
  g_mma = false;
}

TEST(BatchMatmul, RejectsBadArguments) {
  HEARTH_REQUIRE_GPU();
  auto a = upload_half(random_floats(64 * 64), Half::BF16);
  auto out = poisoned(64 * 64 * 4);
  DeviceBuffer none;
  EXPECT_THROW(run_matmul(Half::BF16, MatmulEpilogue::StoreF32, a, a, nullptr, nullptr, 4, 64, 40,
                          MatmulTiles::Auto, out, none),
               std::invalid_argument);  // k not a multiple of 16
  EXPECT_THROW(run_matmul(Half::BF16, MatmulEpilogue::SwiGLU, a, a, nullptr, nullptr, 4, 64, 64,
                          MatmulTiles::Auto, out, none),
               std::invalid_argument);  // SwiGLU without w_up
  if (kernels::batch_matmul_workspace_bytes(4, 1024, 4096) > 0) {
    auto big_a = upload_half(random_floats(4 * 4096), Half::BF16);
    auto big_w = upload_half(random_floats(size_t(1024) * 4096), Half::BF16);
    auto big_out = poisoned(4 * 1024 * 4);
    EXPECT_THROW(run_matmul(Half::BF16, MatmulEpilogue::StoreF32, big_a, big_w, nullptr, nullptr, 4,
                            1024, 4096, MatmulTiles::Auto, big_out, none),
                 std::invalid_argument);  // slices spread over blocks need the workspace
  }
}

// ---- K/V write into the paged pool ----

TEST(PagedKvWrite, MatchesReference) {
  HEARTH_REQUIRE_GPU();
  const KvWriteCase cases[] = {{32, 8, 128, 9, 16, false, false},
                               {14, 2, 64, 7, 16, true, false},
                               {16, 8, 128, 3, 32, false, true},
                               {4, 2, 16, 5, 8, true, true}};
  // layers 0: packed K and V pools apart; layers > 0: one block-major pool (a block holds every
  // layer's keys then values) written as its middle layer, the kernel stepping by block_stride.
  for (int layers : {0, 3})
    for (Half t : kTypes)
      for (const KvWriteCase& c : cases) {
        const int blocks = 12;
        const KvWriteInputs in(c, blocks);
        const int64_t packed = int64_t(c.n_kv_heads) * c.block_size * c.head_dim;
        const int64_t stride = layers ? 2 * layers * packed : 0;
        const size_t pool = size_t(blocks) * (layers ? stride : 2 * packed);
        const size_t k_at = layers ? size_t(2 * packed) : 0;  // layer 1, or the K pool
        const size_t v_at = layers ? k_at + packed : size_t(blocks * packed);
        std::vector<float> q_ref(in.q.size()), kv_ref(pool, 0.0f);
        in.reference(q_ref.data(), kv_ref.data() + k_at, kv_ref.data() + v_at, stride);
        auto q_out = poisoned(in.q.size() * 2);
        auto kv = upload(std::vector<uint16_t>(pool, 0));
        kernels::PagedKvWriteArgs a = in.args();
        a.q_out = q_out.get(), a.k_pool = kv.get<uint16_t>() + k_at;
        a.v_pool = kv.get<uint16_t>() + v_at, a.block_stride = stride;
        kernels::paged_kv_write(t, a, nullptr);
        EXPECT_LT(relative_error(download_half(q_out, in.q.size(), t), q_ref), half_tolerance(t))
            << name(t);
        // The whole pool: the rows at their slots, every other layer and block untouched.
        EXPECT_LT(relative_error(download_half(kv, pool, t), kv_ref), half_tolerance(t))
            << name(t) << " layers " << layers;
      }
}

// ---- Paged attention ----

struct Heads {
  int n_heads, n_kv_heads, head_dim;
};

// A pool of random K/V rows and a stream of attention steps over it. Sequence contents are
// fixed per (sequence id, position); a block table places them in any blocks.
class PagedFixture {
 public:
  // layers 0: packed K and V pools apart; layers > 0: one block-major pool (a block holds every
  // layer's keys then values), read as its last layer through block_stride.
  PagedFixture(Half t, Heads h, int block_size, int num_blocks, int layers = 0)
      : t_(t), h_(h), block_size_(block_size), num_blocks_(num_blocks) {
    const int64_t packed = int64_t(h.n_kv_heads) * block_size * h.head_dim;
    stride_ = layers ? 2 * layers * packed : 0;
    k_at_ = layers ? size_t(2 * (layers - 1) * packed) : 0;
    v_at_ = layers ? k_at_ + packed : size_t(num_blocks * packed);
    step_ = layers ? stride_ : packed;
    kv_ = rounded(random_floats(size_t(num_blocks) * 2 * (layers ? layers : 1) * packed), t);
    dkv_ = upload_half(kv_, t);
  }

  using Seq = PagedSeq;

  // The kernel of the following runs (plan and attention alike).
  void use(kernels::PagedAttentionKernel k) { kernel_ = k; }
  // Whether the runs tell the kernels the pool's extent (as the engine does: the wgmma kernel
  // then reads whole tiles by TMA) or not (all by cp.async).
  void tell_pool_extent(bool tell) { tell_extent_ = tell; }

  // Runs one step; returns out [tokens][n_heads * head_dim] as 16-bit bits.
  std::vector<uint16_t> run(const std::vector<Seq>& seqs, bool split_kv = true) {
    kernels::PagedAttentionArgs a = pool_args();
    a.split_kv = split_kv, a.kernel = kernel_;
    last_ = PagedStep(seqs);
    return run_paged_step(t_, a, last_);
  }
  // Whether the wgmma kernel reads this pool's whole tiles by TMA in the runs.
  bool tma_tiles() const { return kernels::paged_attention_tma_tiles(pool_args()); }

  // The reference of the last run.
  std::vector<float> reference(int num_seqs) const {
    std::vector<float> out(last_.q.size());
    reference::paged_attention(
        last_.q.data(), kv_.data() + k_at_, kv_.data() + v_at_, last_.starts.data(),
        last_.first.data(), last_.table.data(), num_seqs, last_.max_blocks, block_size_, h_.n_heads,
        h_.n_kv_heads, h_.head_dim, 1.0f / std::sqrt(float(h_.head_dim)), out.data(), stride_);
    return out;
  }

  // The pool's part of a step's arguments.
  kernels::PagedAttentionArgs pool_args() const {
    kernels::PagedAttentionArgs a;
    a.k_pool = dkv_.get<uint16_t>() + k_at_;
    a.v_pool = dkv_.get<uint16_t>() + v_at_, a.block_stride = stride_;
    a.block_size = block_size_, a.n_heads = h_.n_heads, a.n_kv_heads = h_.n_kv_heads;
    a.head_dim = h_.head_dim;
    a.pool_blocks = tell_extent_ ? num_blocks_ : 0;
    return a;
  }

  // Fresh blocks from a shuffled free list.
  std::vector<int> take_blocks(int positions) {
    if (free_.empty()) {
      free_.resize(num_blocks_);
      std::iota(free_.begin(), free_.end(), 0);
      std::shuffle(free_.begin(), free_.end(), rng());
    }
    std::vector<int> b((positions + block_size_ - 1) / block_size_);
    for (int& x : b) {
      if (free_.empty()) throw std::runtime_error("test pool too small");
      x = free_.back();
      free_.pop_back();
    }
    return b;
  }

  // Copies positions [0, len) of the sequence in blocks `from` to blocks `to` (K and V).
  void copy_sequence(const std::vector<int>& from, const std::vector<int>& to, int len) {
    const size_t row = h_.head_dim;
    for (int p = 0; p < len; ++p)
      for (int kvh = 0; kvh < h_.n_kv_heads; ++kvh) {
        auto at = [&](const std::vector<int>& b) {
          return size_t(b[p / block_size_]) * step_ +
                 (size_t(kvh) * block_size_ + p % block_size_) * row;
        };
        std::copy_n(&kv_[k_at_ + at(from)], row, &kv_[k_at_ + at(to)]);
        std::copy_n(&kv_[v_at_ + at(from)], row, &kv_[v_at_ + at(to)]);
      }
    dkv_ = upload_half(kv_, t_);
  }

  Seq random_seq(int first_pos, int n) {
    Seq s{take_blocks(first_pos + n), first_pos, n, {}};
    s.q = rounded(random_floats(size_t(n) * h_.n_heads * h_.head_dim), t_);
    return s;
  }

 private:
  Half t_;
  Heads h_;
  int block_size_, num_blocks_;
  int64_t stride_ = 0, step_ = 0;  // block_stride as passed (0: packed), and as it is
  size_t k_at_ = 0, v_at_ = 0;     // offsets of the K and V of block 0 in kv_
  std::vector<float> kv_;
  DeviceBuffer dkv_;
  std::vector<int> free_;
  PagedStep last_;
  kernels::PagedAttentionKernel kernel_ = kernels::PagedAttentionKernel::Auto;
  bool tell_extent_ = true;
};

// The paged attention kernels this device runs: mma.sync always, wgmma on Hopper (head_dim 64
// and 128), and there the default (auto), which picks one of them per step.
std::vector<kernels::PagedAttentionKernel> paged_kernels(int head_dim) {
  std::vector<kernels::PagedAttentionKernel> k{kernels::PagedAttentionKernel::MmaSync,
                                               kernels::PagedAttentionKernel::MmaSyncGeneral};
  if (kernels::wgmma_matmul_available() && (head_dim == 64 || head_dim == 128)) {
    k.push_back(kernels::PagedAttentionKernel::Wgmma);
    k.push_back(kernels::PagedAttentionKernel::Auto);
  }
  return k;
}
const char* kernel_name(kernels::PagedAttentionKernel k) {
  switch (k) {
    case kernels::PagedAttentionKernel::Wgmma:
      return "wgmma";
    case kernels::PagedAttentionKernel::MmaSync:
      return "mma.sync";
    case kernels::PagedAttentionKernel::MmaSyncGeneral:
      return "mma.sync general";
    default:
      return "auto";
  }
}

std::vector<float> from_bits(const std::vector<uint16_t>& bits, Half t) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = from_half(bits[i], t);
  return v;
}

TEST(PagedAttention, MatchesReference) {
  HEARTH_REQUIRE_GPU();
  const Heads shapes[] = {{32, 8, 128}, {14, 2, 64}, {8, 8, 64}, {16, 2, 128}, {4, 1, 32}};
  for (Half t : kTypes)
    for (const Heads& h : shapes)
      for (auto [block_size, layers] : {std::pair{16, 0}, {32, 0}, {16, 2}})
        for (kernels::PagedAttentionKernel kernel : paged_kernels(h.head_dim)) {
          PagedFixture f(t, h, block_size, 400, layers);
          f.use(kernel);
          // Decodes at split edges, chunks from the start and mid-sequence, one crossing splits.
          std::vector<PagedFixture::Seq> seqs;
          for (auto [first, n] : {std::pair{0, 1},
                                  {511, 1},
                                  {600, 1},
                                  {0, 70},
                                  {1000, 40},
                                  {505, 9},
                                  {1500, 1},
                                  {1023, 3}})
            seqs.push_back(f.random_seq(first, n));
          const std::vector<float> got = from_bits(f.run(seqs), t);
          const std::vector<float> ref = f.reference(int(seqs.size()));
          // P is rounded to 16 bits before the PV product, as in every flash kernel: allow 2x.
          EXPECT_LT(relative_error(got, ref), 2 * half_tolerance(t))
              << name(t) << " heads " << h.n_heads << "/" << h.n_kv_heads << " d=" << h.head_dim
              << " block " << block_size << " layers " << layers << " " << kernel_name(kernel);
          // Splits in separate blocks or walked by one block: the same bits.
          const std::vector<uint16_t> split = f.run(seqs, true), whole = f.run(seqs, false);
          EXPECT_EQ(split, whole) << name(t) << " d=" << h.head_dim << " " << kernel_name(kernel);
        }
}

// One sequence's queries, computed as decodes, in prompt chunks of many sizes, in other
// blocks, among up to 99 other sequences and at any place in the step: the same bits.
TEST(PagedAttention, QueryResultDoesNotDependOnTheStep) {
  HEARTH_REQUIRE_GPU();
  const int len = 1300;  // crosses two split boundaries (512, 1024)
  struct Config {
    Half t;
    Heads h;
    int block_size;
  };
  for (const Config& c :
       {Config{Half::BF16, {32, 8, 128}, 16}, Config{Half::F16, {14, 2, 64}, 32}}) {
    for (kernels::PagedAttentionKernel kernel : paged_kernels(c.h.head_dim)) {
      PagedFixture f(c.t, c.h, c.block_size, 4500);
      f.use(kernel);
      const int qd = c.h.n_heads * c.h.head_dim;
      const PagedFixture::Seq target = f.random_seq(0, len);
      // Queries of `target` at positions [first, first + n) as a step entry.
      auto chunk = [&](const std::vector<int>& blocks, int first, int n) {
        PagedFixture::Seq s{blocks, first, n, {}};
        s.q.assign(target.q.begin() + size_t(first) * qd,
                   target.q.begin() + size_t(first + n) * qd);
        return s;
      };
      // Reference: the whole prompt as one chunk, alone.
      const std::vector<uint16_t> want = f.run({chunk(target.blocks, 0, len)});
      auto expect_rows = [&](const std::vector<uint16_t>& got, int token0, int first, int n,
                             const std::string& what) {
        const int bad = [&] {
          int b = 0;
          for (int i = 0; i < n; ++i)
            b += std::memcmp(&got[size_t(token0 + i) * qd], &want[size_t(first + i) * qd],
                             size_t(qd) * 2) != 0;
          return b;
        }();
        EXPECT_EQ(bad, 0) << name(c.t) << " d=" << c.h.head_dim << " " << kernel_name(kernel)
                          << ": " << what;
      };

      // Chunked prefill, chunk sizes 1 (every position as a decode), 7, 64, 300, 512, 1000.
      for (int size : {1, 7, 64, 300, 512, 1000})
        for (int first = 0; first < len; first += size) {
          const int n = std::min(size, len - first);
          expect_rows(f.run({chunk(target.blocks, first, n)}), 0, first, n,
                      "chunk size " + std::to_string(size) + " at " + std::to_string(first));
        }

      // The same cache in other blocks (a fresh, shuffled block table).
      const std::vector<int> moved = f.take_blocks(len);
      f.copy_sequence(target.blocks, moved, len);
      expect_rows(f.run({chunk(moved, 0, len)}), 0, 0, len, "other blocks");
      for (int p : {0, 511, 512, 1299})
        expect_rows(f.run({chunk(moved, p, 1)}), 0, p, 1, "other blocks, decode");

      // Among 1 .. 99 other sequences of mixed lengths (decodes and chunks), at any place, with
      // splits spread over blocks or not.
      for (int others : {1, 2, 7, 32, 99}) {
        std::vector<PagedFixture::Seq> batch;
        for (int i = 0; i < others; ++i) {
          const bool decode = rng()() % 3 != 0;
          const int first = int(rng()() % 800);
          batch.push_back(f.random_seq(first, decode ? 1 : 1 + int(rng()() % 64)));
        }
        struct Probe {
          int first, n;
        };
        for (Probe probe :
             {Probe{1299, 1}, Probe{511, 1}, Probe{700, 64}, Probe{500, 30}, Probe{0, 600}})
          for (bool split_kv : {true, false}) {
            const size_t at = rng()() % (batch.size() + 1);
            std::vector<PagedFixture::Seq> step = batch;
            step.insert(step.begin() + at, chunk(target.blocks, probe.first, probe.n));
            int token0 = 0;
            for (size_t i = 0; i < at; ++i) token0 += step[i].n;
            expect_rows(f.run(step, split_kv), token0, probe.first, probe.n,
                        std::to_string(others) + " others, place " + std::to_string(at) +
                            ", queries " + std::to_string(probe.first) + "+" +
                            std::to_string(probe.n) + (split_kv ? "" : ", splits in one block"));
          }
      }
    }
  }
}

// Decode blocks (<= 16 rows) run a three-stage K/V ring with the block table read a tile
// ahead; prompt chunks the two-stage one. The ring's edges: one key, exactly one tile, fewer
// tiles than stages, a split of eight tiles, a split boundary inside a KV block (block sizes
// 24 and 48), one block walking every split, head_dim 16 and 32 (one warp) and 64 and 128 (four
// cooperating warps), packed and block-major pools. Each decode (and 2-token chunk of <= 16
// rows), alone or all in one step, gives its row of the whole prompt computed as one chunk,
// bit for bit.
TEST(PagedAttention, DecodeRingEdgesKeepTheBits) {
  HEARTH_REQUIRE_GPU();
  const int len = 1100;  // splits of 512, 512 and 76 keys: the last has 2 tiles
  struct Config {
    Half t;
    Heads h;
    int block_size, layers;
  };
  for (const Config& c :
       {Config{Half::BF16, {32, 8, 128}, 16, 0}, Config{Half::F16, {14, 2, 64}, 32, 0},
        Config{Half::BF16, {32, 8, 128}, 48, 2}, Config{Half::F16, {4, 1, 32}, 24, 0},
        Config{Half::BF16, {8, 4, 16}, 64, 2}}) {
    PagedFixture f(c.t, c.h, c.block_size, 2 * len / c.block_size + 8, c.layers);
    f.use(kernels::PagedAttentionKernel::MmaSync);
    const int qd = c.h.n_heads * c.h.head_dim;
    const PagedFixture::Seq target = f.random_seq(0, len);
    auto chunk = [&](int first, int n) {
      PagedFixture::Seq s{target.blocks, first, n, {}};
      s.q.assign(target.q.begin() + size_t(first) * qd, target.q.begin() + size_t(first + n) * qd);
      return s;
    };
    const std::vector<uint16_t> want = f.run({chunk(0, len)});
    const std::string what = std::string(name(c.t)) + " d=" + std::to_string(c.h.head_dim) +
                             " group " + std::to_string(c.h.n_heads / c.h.n_kv_heads) + " block " +
                             std::to_string(c.block_size);
    auto bad_rows = [&](const std::vector<uint16_t>& got, int token0, int first, int n) {
      int bad = 0;
      for (int i = 0; i < n; ++i)
        bad += std::memcmp(&got[size_t(token0 + i) * qd], &want[size_t(first + i) * qd],
                           size_t(qd) * 2) != 0;
      return bad;
    };
    struct Probe {
      int first, n;
    };
    std::vector<Probe> probes;
    for (int p : {0,   1,   63,  64,  65,  127,  128,  191,  192,  511,
                  512, 513, 575, 576, 700, 1023, 1024, 1087, 1088, 1099})
      probes.push_back({p, 1});
    if (2 * c.h.n_heads / c.h.n_kv_heads <= 16)
      for (int p : {62, 510, 1022, 1098}) probes.push_back({p, 2});
    for (bool split_kv : {true, false}) {
      const std::string how = split_kv ? "" : ", splits in one block";
      std::vector<PagedFixture::Seq> all;
      for (const Probe& pr : probes) {
        all.push_back(chunk(pr.first, pr.n));
        EXPECT_EQ(bad_rows(f.run({all.back()}, split_kv), 0, pr.first, pr.n), 0)
            << what << ": queries " << pr.first << "+" << pr.n << " alone" << how;
      }
      const std::vector<uint16_t> together = f.run(all, split_kv);
      int token0 = 0;
      for (const Probe& pr : probes) {
        EXPECT_EQ(bad_rows(together, token0, pr.first, pr.n), 0)
            << what << ": queries " << pr.first << "+" << pr.n << " in one step" << how;
        token0 += pr.n;
      }
    }
  }
}

// The two kernels on one step (decodes at and across split edges, chunks from the start and
// mid-sequence), bit for bit: the default picks mma.sync for steps of decodes alone and wgmma
// otherwise, which keeps a row's bits independent of the step only because these are equal.
TEST(PagedAttention, WgmmaEqualsMmaSyncBitForBit) {
  HEARTH_REQUIRE_GPU();
  if (!kernels::wgmma_matmul_available()) GTEST_SKIP() << "no compute-capability 9.0 device";
  // Block sizes from 8 to 64 keys (TMA boxes of one block) and one that is not a power of two
  // (cp.async only); packed pools and block-major ones of two and three layers (block_stride).
  struct Case {
    Half t;
    Heads h;
    int block_size, layers;
  };
  for (const Case& c : {Case{Half::BF16, {32, 8, 128}, 16, 0},
                        {Half::BF16, {32, 8, 128}, 32, 3},
                        {Half::F16, {14, 2, 64}, 16, 0},
                        {Half::F16, {14, 2, 64}, 8, 3},
                        {Half::F16, {16, 2, 128}, 64, 0},
                        {Half::F16, {16, 2, 128}, 24, 0},
                        {Half::BF16, {8, 8, 64}, 32, 0},
                        {Half::BF16, {8, 8, 64}, 16, 2}}) {
    PagedFixture f(c.t, c.h, c.block_size, 12000 / c.block_size, c.layers);
    std::vector<PagedFixture::Seq> seqs;
    for (auto [first, n] : {std::pair{0, 700},
                            {1023, 1},
                            {300, 200},
                            {2000, 1},
                            {0, 1},
                            {511, 1},
                            {512, 1},
                            {1500, 77},
                            {640, 64}})
      seqs.push_back(f.random_seq(first, n));
    f.use(kernels::PagedAttentionKernel::MmaSync);
    const std::vector<uint16_t> old_bits = f.run(seqs);
    for (bool tma : {true, false}) {
      f.use(kernels::PagedAttentionKernel::Wgmma);
      f.tell_pool_extent(tma);
      // The path under test is the one taken: TMA tiles wherever the rule allows them.
      EXPECT_EQ(f.tma_tiles(), tma && c.block_size != 24) << "block " << c.block_size;
      const std::vector<uint16_t> new_bits = f.run(seqs);
      ASSERT_EQ(old_bits.size(), new_bits.size());
      size_t same = 0;
      for (size_t i = 0; i < old_bits.size(); ++i) same += old_bits[i] == new_bits[i];
      EXPECT_EQ(same, old_bits.size())
          << name(c.t) << " heads " << c.h.n_heads << "/" << c.h.n_kv_heads << " d=" << c.h.head_dim
          << " block " << c.block_size << " layers " << c.layers
          << (tma ? " (TMA tiles)" : " (cp.async tiles)");
    }
  }
}

// The rule for TMA tiles, on the host (no device needed): every condition refuses alone.
TEST(PagedAttention, TmaTilesOnlyWherePoolsCanBeDescribed) {
  kernels::PagedAttentionArgs ok;
  ok.k_pool = reinterpret_cast<const void*>(uintptr_t(1) << 30);
  ok.v_pool = reinterpret_cast<const void*>(uintptr_t(3) << 30);
  ok.n_heads = 32, ok.n_kv_heads = 8, ok.head_dim = 128, ok.block_size = 16;
  ok.pool_blocks = 1000;
  EXPECT_TRUE(kernels::paged_attention_tma_tiles(ok));
  auto refused = [&](auto edit) {
    kernels::PagedAttentionArgs a = ok;
    edit(a);
    return !kernels::paged_attention_tma_tiles(a);
  };
  // A block-major pool: every layer's keys and values in a block, read through block_stride.
  EXPECT_FALSE(refused([](auto& a) { a.block_stride = 2 * 32 * 8 * 16 * 128; }));
  EXPECT_FALSE(refused([](auto& a) { a.block_size = 8; }));
  EXPECT_FALSE(refused([](auto& a) { a.block_size = 64; }));
  EXPECT_FALSE(refused([](auto& a) { a.head_dim = 64; }));
  EXPECT_TRUE(refused([](auto& a) { a.pool_blocks = 0; }));  // extent unknown
  EXPECT_TRUE(refused([](auto& a) { a.block_size = 24; }));  // a box would cross tiles
  EXPECT_TRUE(refused([](auto& a) { a.block_size = 4; }));
  EXPECT_TRUE(refused([](auto& a) { a.block_size = 128; }));
  EXPECT_TRUE(refused([](auto& a) { a.head_dim = 96; }));
  EXPECT_TRUE(refused([](auto& a) { a.fp8_kv = true; }));
  EXPECT_TRUE(refused([](auto& a) { a.v_pool = static_cast<const char*>(a.v_pool) + 8; }));
  EXPECT_TRUE(refused([](auto& a) { a.block_stride = 8 * 16 * 128 + 8; }));    // not whole rows
  EXPECT_TRUE(refused([](auto& a) { a.block_stride = 8 * 16 * 128 - 128; }));  // heads overlap
  EXPECT_TRUE(refused([](auto& a) { a.pool_blocks = int64_t(1) << 28; }));     // rows past 2^31
}

// Steps of decodes alone run on the mma.sync kernel's decode instantiation (16-row items, three
// blocks an SM); the general one must give every value the same bits: decodes at and across
// split edges, with their splits spread over blocks or walked in one, a few sequences and 120
// of up to three splits each, GQA groups of 1 to 16.
TEST(PagedAttention, DecodeKernelEqualsGeneralBitForBit) {
  HEARTH_REQUIRE_GPU();
  for (auto [t, h] : {std::pair{Half::BF16, Heads{32, 8, 128}},
                      {Half::F16, Heads{14, 2, 64}},
                      {Half::BF16, Heads{16, 1, 128}},
                      {Half::F16, Heads{8, 8, 64}}})
    for (int block_size : {16, 32}) {
      PagedFixture f(t, h, block_size, 6000);
      for (int count : {10, 120}) {
        std::vector<PagedFixture::Seq> seqs;
        const int firsts[] = {0, 1, 63, 64, 511, 512, 513, 1023, 1500, 2047};
        for (int i = 0; i < count; ++i)
          seqs.push_back(f.random_seq(count <= 10 ? firsts[i] : (i * 37) % 1300, 1));
        for (bool split_kv : {true, false}) {
          f.use(kernels::PagedAttentionKernel::MmaSyncGeneral);
          const std::vector<uint16_t> general = f.run(seqs, split_kv);
          f.use(kernels::PagedAttentionKernel::MmaSync);
          const std::vector<uint16_t> decode = f.run(seqs, split_kv);
          ASSERT_EQ(general.size(), decode.size());
          size_t same = 0;
          for (size_t i = 0; i < general.size(); ++i) same += general[i] == decode[i];
          EXPECT_EQ(same, general.size())
              << name(t) << " heads " << h.n_heads << "/" << h.n_kv_heads << " d=" << h.head_dim
              << " block " << block_size << ", " << count << " decodes"
              << (split_kv ? "" : ", splits in one block");
        }
      }
    }
}

// ---- Sampling ----

struct RowCase {
  float temperature;
  int top_k;
  float top_p, min_p, penalty, frequency, presence;
  bool bias;
  int top_logprobs;
};
// Every combination the rules have: greedy, temperature alone (no sort), top-k, top-p, min-p,
// each with and without logit_bias, repetition, frequency and presence penalties.
const RowCase kRowCases[] = {
    {0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, false, 0},
    {0.0f, 0, 1.0f, 0.0f, 1.5f, 0.5f, 0.0f, true, 5},
    {0.8f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, false, 1},
    {1.0f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, false, 20},
    {0.7f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, false, 0},
    {1.2f, 100, 0.8f, 0.02f, 1.0f, 0.0f, 0.0f, false, 3},
    {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, false, 0},
    {0.9f, 0, 0.95f, 0.0f, 1.3f, 0.0f, 0.0f, false, 0},
    {1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, false, 2},
    {0.6f, 5, 1.0f, 0.0f, 1.2f, 0.0f, 0.0f, false, 0},
    {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.7f, 0.4f, true, 5},
    {0.5f, 0, 1.0f, 0.0f, 1.1f, -0.5f, 1.0f, true, 0},
    {1.1f, 50, 1.0f, 0.01f, 1.0f, 2.0f, -2.0f, true, 4},
    {0.9f, 0, 0.7f, 0.0f, 1.0f, 1.0f, 1.0f, true, 0},
    {0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 2.0f, true, 20},
    // top-p's selection by mass: a tiny nucleus, a nucleus of most of the vocabulary (the
    // select's buckets stay large for several digits), and one within top-k with min-p.
    {1.0f, 0, 0.05f, 0.0f, 1.0f, 0.0f, 0.0f, false, 0},
    {1.5f, 0, 0.999f, 0.0f, 1.0f, 0.3f, 0.0f, true, 0},
    {2.0f, 1000, 0.5f, 0.001f, 1.0f, 0.0f, 0.0f, false, 2},
};

struct SampleBatch {
  std::vector<float> logits;  // [rows][vocab]
  std::vector<kernels::SampleRowParams> params;
  std::vector<SamplingParams> host;
  std::vector<std::vector<int32_t>> seen;
};

SampleBatch make_sample_batch(int rows, int vocab) {
  SampleBatch b;
  b.logits = random_floats(size_t(rows) * vocab, 2.5f);
  for (int r = 0; r < rows; ++r) {
    const RowCase& c = kRowCases[r % std::size(kRowCases)];
    kernels::SampleRowParams p;
    p.temperature = c.temperature, p.top_k = c.top_k, p.top_p = c.top_p, p.min_p = c.min_p;
    p.penalty = c.penalty, p.seed = rng()(), p.step = rng()() % 30;
    p.frequency = c.frequency, p.presence = c.presence, p.top_logprobs = c.top_logprobs;
    b.params.push_back(p);
    SamplingParams h;
    h.temperature = p.temperature, h.top_k = p.top_k, h.top_p = p.top_p, h.min_p = p.min_p;
    h.repetition_penalty = p.penalty, h.seed = p.seed;
    h.frequency_penalty = c.frequency, h.presence_penalty = c.presence;
    if (c.bias) {
      std::map<int32_t, float> bias;
      for (int i = 0; i < 30; ++i)
        bias[int32_t(rng()() % vocab)] = float(int(rng()() % 4001) - 2000) / 20.0f;
      h.logit_bias.assign(bias.begin(), bias.end());
    }
    b.host.push_back(h);
    // Each row its own sequence so far, with repeats (counted by frequency, penalised once).
    std::vector<int32_t> seen;
    for (int i = 0; i < 40; ++i) seen.push_back(int32_t(rng()() % vocab));
    for (int i = 0; i < 5; ++i) seen.push_back(seen[seen.size() - 1 - rng()() % 10]);
    b.seen.push_back(seen);
    // Ties at the top now and then: the lowest id must win.
    if (r % 4 == 1) b.logits[size_t(r) * vocab + vocab / 2] = b.logits[size_t(r) * vocab + 3] = 30;
    // Coarse logits now and then: ties everywhere, so top-k, top_logprobs and the selects
    // order by id within equal values.
    if (r % 7 == 3)
      for (int i = 0; i < vocab; ++i) {
        float& v = b.logits[size_t(r) * vocab + i];
        v = std::round(v * 2.0f) / 2.0f;
      }
  }
  return b;
}

struct RowResult {
  int32_t token;
  uint32_t logprob_bits;
  std::vector<int32_t> top_tokens;
  std::vector<uint32_t> top_bits;
  bool operator==(const RowResult&) const = default;
};

// Samples rows `order` of the batch together; returns each row's result in `order`'s order.
std::vector<RowResult> sample_rows(const SampleBatch& b, int vocab, const std::vector<int>& order) {
  std::vector<float> logits;
  std::vector<kernels::SampleRowParams> params;
  std::vector<int> offsets{0};
  std::vector<sampling_rules::TokenEdit> edits;
  for (int r : order) {
    logits.insert(logits.end(), b.logits.begin() + size_t(r) * vocab,
                  b.logits.begin() + size_t(r + 1) * vocab);
    params.push_back(b.params[r]);
    const auto e = token_edits(b.host[r], b.seen[r], b.params[r].step, vocab);
    edits.insert(edits.end(), e.begin(), e.end());
    offsets.push_back(int(edits.size()));
  }
  if (edits.empty()) edits.emplace_back();  // something to upload
  const int rows = int(order.size());
  constexpr int kTop = kernels::kMaxSampleTopLogprobs;
  auto dl = upload(logits), dp = upload(params), doff = upload(offsets), dedits = upload(edits);
  auto tokens = poisoned(rows * 4), logprobs = poisoned(rows * 4);
  auto top_tokens = poisoned(rows * kTop * 4), top_logprobs = poisoned(rows * kTop * 4);
  kernels::BatchSampleArgs a;
  a.logits = dl.get<float>(), a.rows = rows, a.vocab = vocab;
  a.params = dp.get<kernels::SampleRowParams>();
  a.edit_offsets = doff.get<int>(), a.edits = dedits.get<sampling_rules::TokenEdit>();
  a.tokens = tokens.get<int32_t>(), a.logprobs = logprobs.get<float>();
  a.top_tokens = top_tokens.get<int32_t>(), a.top_logprobs = top_logprobs.get<float>();
  kernels::batch_sample(a, nullptr);
  auto tok = download<int32_t>(tokens, rows);
  auto lp = download<uint32_t>(logprobs, rows);
  auto tt = download<int32_t>(top_tokens, size_t(rows) * kTop);
  auto tl = download<uint32_t>(top_logprobs, size_t(rows) * kTop);
  std::vector<RowResult> out;
  for (int i = 0; i < rows; ++i) {
    RowResult x{tok[i], lp[i], {}, {}};
    for (int j = 0; j < b.params[order[i]].top_logprobs; ++j)
      x.top_tokens.push_back(tt[size_t(i) * kTop + j]),
          x.top_bits.push_back(tl[size_t(i) * kTop + j]);
    out.push_back(x);
  }
  return out;
}

// Every row of the batch, sampled together.
std::vector<RowResult> sample_all(const SampleBatch& b, int vocab) {
  std::vector<int> all(b.params.size());
  std::iota(all.begin(), all.end(), 0);
  return sample_rows(b, vocab, all);
}

// The host sampler's choice for row r.
SampledToken host_sample(Sampler& host, const SampleBatch& b, int vocab, int r) {
  const std::span<const float> row(&b.logits[size_t(r) * vocab], vocab);
  return host.sample(row, b.host[r], b.seen[r], b.params[r].step);
}

TEST(BatchSampling, MatchesTheHostSampler) {
  HEARTH_REQUIRE_GPU();
  for (int vocab : {1000, 128256}) {
    const int rows = 45;
    const SampleBatch b = make_sample_batch(rows, vocab);
    const auto got = sample_all(b, vocab);
    Sampler host;
    for (int r = 0; r < rows; ++r) {
      const kernels::SampleRowParams& q = b.params[r];
      const std::span<const float> row(&b.logits[size_t(r) * vocab], vocab);
      const SampledToken want = host_sample(host, b, vocab, r);
      float logprob;
      std::memcpy(&logprob, &got[r].logprob_bits, 4);
      EXPECT_EQ(got[r].token, want.token)
          << "vocab " << vocab << " row " << r << " T=" << q.temperature << " k=" << q.top_k
          << " p=" << q.top_p << " min_p=" << q.min_p << " penalty " << q.penalty << " freq "
          << q.frequency << " presence " << q.presence << " bias " << b.host[r].logit_bias.size();
      // The device sums the logprob's mass in another (fixed) order and from float terms.
      EXPECT_NEAR(logprob, want.logprob, 1e-4) << "vocab " << vocab << " row " << r;
      const auto top = top_logprobs(row, q.top_logprobs);
      ASSERT_EQ(got[r].top_tokens.size(), top.size());
      for (size_t i = 0; i < top.size(); ++i) {
        EXPECT_EQ(got[r].top_tokens[i], top[i].token) << "row " << r << " top " << i;
        float v;
        std::memcpy(&v, &got[r].top_bits[i], 4);
        EXPECT_NEAR(v, top[i].logprob, 1e-4) << "row " << r << " top " << i;
      }
    }
  }
}

// Non-finite logits in a row (all NaN, one NaN, one +inf, all -inf) leave its logprob NaN or
// its token no id, which check_device_sample (the batched backend's check) turns into the host
// sampler's error; the rows beside it keep their bits.
TEST(BatchSampling, NonFiniteRowsAreCaughtAndTheirNeighboursKeepTheirBits) {
  HEARTH_REQUIRE_GPU();
  for (int vocab : {1000, 128256}) {
    const int rows = 12;
    const SampleBatch clean = make_sample_batch(rows, vocab);
    SampleBatch bad = clean;
    auto row = [&](int r) { return bad.logits.begin() + ptrdiff_t(r) * vocab; };
    std::fill(row(1), row(2), NAN);
    row(4)[vocab / 2] = NAN;
    row(6)[vocab / 3] = INFINITY;
    std::fill(row(9), row(10), -INFINITY);
    row(11)[vocab / 5] = -INFINITY;  // one: the host sampler refuses it too
    const std::set<int> poisoned = {1, 4, 6, 9, 11};
    const auto want = sample_all(clean, vocab), got = sample_all(bad, vocab);
    for (int r = 0; r < rows; ++r) {
      if (!poisoned.contains(r)) {
        EXPECT_TRUE(got[r] == want[r]) << "vocab " << vocab << " row " << r;
        continue;
      }
      SampledToken s{got[r].token, 0.0f};
      std::memcpy(&s.logprob, &got[r].logprob_bits, 4);
      EXPECT_THROW(check_device_sample(s, vocab, 0), NonFiniteLogits)
          << "vocab " << vocab << " row " << r << ": token " << s.token << " logprob " << s.logprob;
    }
  }
}

// More rows than a launch once sampled per pass (64): one launch, each row the host's token.
TEST(BatchSampling, ManyRowsInOneLaunchMatchTheHostSampler) {
  HEARTH_REQUIRE_GPU();
  const int vocab = 3001, rows = 300;
  const SampleBatch b = make_sample_batch(rows, vocab);
  const auto got = sample_all(b, vocab);
  Sampler host;
  for (int r = 0; r < rows; ++r)
    EXPECT_EQ(got[r].token, host_sample(host, b, vocab, r).token)
        << "row " << r << " p=" << b.params[r].top_p << " k=" << b.params[r].top_k;
}

TEST(BatchSampling, RowAloneEqualsRowAmongOthers) {
  HEARTH_REQUIRE_GPU();
  const int vocab = 32000, rows = 37;
  const SampleBatch b = make_sample_batch(rows, vocab);
  std::vector<int> all(rows);
  std::iota(all.begin(), all.end(), 0);
  const auto together = sample_rows(b, vocab, all);
  // Shuffled, and in smaller batches.
  std::vector<int> shuffled = all;
  std::shuffle(shuffled.begin(), shuffled.end(), rng());
  const auto mixed = sample_rows(b, vocab, shuffled);
  for (int i = 0; i < rows; ++i)
    EXPECT_TRUE(mixed[i] == together[shuffled[i]]) << "row " << shuffled[i];
  const std::vector<int> part(shuffled.begin(), shuffled.begin() + 5);
  const auto few = sample_rows(b, vocab, part);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(few[i] == together[part[i]]) << "row " << part[i];
  for (int r : {0, 1, 2, 5, 11, 12, 17, 36})
    EXPECT_TRUE(sample_rows(b, vocab, {r})[0] == together[r]) << r;
}

// The settings of a row whose logits were just appended: no edits, a fresh seed and step.
void add_unedited_row(SampleBatch& b, float temperature, float top_p, float min_p) {
  kernels::SampleRowParams p;
  p.temperature = temperature, p.top_p = top_p, p.min_p = min_p;
  p.seed = rng()(), p.step = rng()() % 30;
  b.params.push_back(p);
  SamplingParams h;
  h.temperature = p.temperature, h.top_p = p.top_p, h.min_p = p.min_p, h.seed = p.seed;
  b.host.push_back(h);
  b.seen.emplace_back();
}

// top-p's select adds its buckets' counts and masses once per distinct digit of a warp (one
// reduction per group of lanes that share a digit): rows whose keys all share one digit (equal
// logits: ties by id), few values, a new exponent and sign every lane (a digit per lane or two),
// and random logits with far-off outliers; each the host's token at every nucleus size.
TEST(BatchSampling, TopPSelectOverCrowdedAndScatteredDigits) {
  HEARTH_REQUIRE_GPU();
  const int vocab = 50001;  // not a multiple of the block: a last, partial warp
  SampleBatch b;
  for (int kind = 0; kind < 4; ++kind)
    for (float top_p : {0.02f, 0.5f, 0.9f, 0.999f}) {
      for (int i = 0; i < vocab; ++i) {
        const uint32_t x = uint32_t(rng()());
        float v = 0;
        if (kind == 0) v = 1.0f;
        if (kind == 1) v = float(x % 5);
        if (kind == 2)
          v = std::ldexp(1.0f + float(x % 1024) / 1024.0f, i % 32 - 27) * (i / 32 % 3 ? 1 : -1);
        if (kind == 3)
          v = i % 8 == 0 ? std::ldexp(float(x % 1000), -int(x % 24)) : float(x % 20001) / 4000.0f;
        b.logits.push_back(v);
      }
      add_unedited_row(b, b.params.size() % 2 ? 0.7f : 1.0f, top_p, 0.0f);
    }
  const auto got = sample_all(b, vocab);
  Sampler host;
  for (int r = 0; r < int(b.params.size()); ++r)
    EXPECT_EQ(got[r].token, host_sample(host, b, vocab, r).token)
        << "kind " << r / 4 << " p=" << b.params[r].top_p << " T=" << b.params[r].temperature;
}

// The sampler passes over most tokens by bounds (the largest noise there is, then the token's
// own uniform against the noise it would need) and scores exactly only the rest. Rows made to
// sit on those bounds' edges: near-ties (spreads of 1e-3), wide spreads, temperatures from
// 1e-3 to 1e3 and min-p; the host scores every survivor exactly, so any token passed over
// that should have won shows here.
TEST(BatchSampling, BoundsNeverPassOverTheWinner) {
  HEARTH_REQUIRE_GPU();
  const int vocab = 4096;
  SampleBatch b;
  for (float spread : {1e-3f, 0.3f, 3.0f, 40.0f})
    for (float temperature : {1e-3f, 0.05f, 1.0f, 50.0f, 1e3f})
      for (float min_p : {0.0f, 0.2f})
        for (int seed = 0; seed < 3; ++seed) {
          const auto row = random_floats(vocab, spread);
          b.logits.insert(b.logits.end(), row.begin(), row.end());
          add_unedited_row(b, temperature, 1.0f, min_p);
        }
  const auto got = sample_all(b, vocab);
  Sampler host;
  for (int r = 0; r < int(b.params.size()); ++r)
    EXPECT_EQ(got[r].token, host_sample(host, b, vocab, r).token)
        << "row " << r << " T=" << b.params[r].temperature << " min_p=" << b.params[r].min_p;
}

TEST(GatherRows, CopiesTheRequestedRows) {
  HEARTH_REQUIRE_GPU();
  for (int hidden : {4096, 999}) {
    const int tokens = 50;
    auto in = random_floats(size_t(tokens) * hidden);
    const std::vector<int32_t> idx{49, 0, 7, 7, 23};
    auto din = upload(in), didx = upload(idx);
    auto out = poisoned(idx.size() * hidden * 4);
    kernels::gather_rows(din.get<float>(), didx.get<int32_t>(), int(idx.size()), hidden,
                         out.get<float>(), nullptr);
    const auto got = download_f32(out, idx.size() * hidden);
    for (size_t r = 0; r < idx.size(); ++r)
      EXPECT_EQ(0, std::memcmp(&got[r * hidden], &in[size_t(idx[r]) * hidden], hidden * 4))
          << "row " << r;
  }
}

}  // namespace
}  // namespace hearth
