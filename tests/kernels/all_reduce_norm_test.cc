// The one-shot all-reduce that also norms its rows (kernels/all_reduce.h, issue 26) against the
// all-reduce then kernels::rmsnorm, byte for byte, on fresh random inputs: every rank's residual
// and normed rows, bf16 and f16, decode to prefill row counts, widths that take each of the
// rmsnorm's block sizes and the scalar path; interleaved with plain calls and replayed from
// captured graphs. Where the group takes two shots (or fuse_norm is off) it leaves the norm to
// the caller: the same bytes too. Every norm launch here comes after every rank's all-reduce is
// enqueued: one launched on rank 0 before rank 1's all-reduce may load its kernel lazily, which
// waits for rank 0's running all-reduce, which waits for rank 1: a deadlock (the trap after
// ~10 s). Skips with fewer than 2 GPUs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/all_reduce.h"
#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"
#include "kernels/ops.h"
#include "kernels/peer_all_reduce.h"
#include "kernels/reference.h"
#include "tests/kernels/gpu_test_util.h"

namespace hearth {
namespace {

using kernels::Half;
using kernels::PeerAllReduce;
using test::gpu_count;

constexpr int64_t kMaxRows = 257;
constexpr int kMaxHidden = 4096;

std::vector<int> first_devices(int n) {
  std::vector<int> d;
  for (int i = 0; i < n; ++i) d.push_back(i);
  return d;
}

// One rank's buffers on its device: partial, residual (x), norm weight and two norm outputs.
struct Side {
  DeviceBuffer partial, x, weight, xn;
  CudaStream stream;
};

std::vector<Side> make_sides(const PeerAllReduce& ar) {
  std::vector<Side> sides;
  const size_t floats = size_t(kMaxRows) * kMaxHidden;
  for (int r = 0; r < ar.ranks(); ++r) {
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    sides.push_back({DeviceBuffer(floats * 4), DeviceBuffer(floats * 4),
                     DeviceBuffer(kMaxHidden * 4), DeviceBuffer(floats * 2), make_stream()});
  }
  HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(0)));
  return sides;
}

// Every rank's outputs of one call.
struct Outputs {
  std::vector<std::vector<float>> x;
  std::vector<std::vector<uint8_t>> xn;
};

struct Inputs {
  std::vector<std::vector<float>> parts;
  std::vector<float> residual, weight;
};

Inputs random_inputs(int ranks, int64_t count, int hidden) {
  Inputs in;
  for (int r = 0; r < ranks; ++r) in.parts.push_back(test::random_floats(size_t(count)));
  in.residual = test::random_floats(size_t(count), 4.0f);
  in.weight = test::random_floats(size_t(hidden));
  return in;
}

void upload(PeerAllReduce& ar, std::vector<Side>& sides, const Inputs& in) {
  for (int r = 0; r < ar.ranks(); ++r) {
    Side& s = sides[size_t(r)];
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    HEARTH_CUDA_CHECK(cudaMemcpy(s.partial.get(), in.parts[size_t(r)].data(),
                                 in.residual.size() * 4, cudaMemcpyHostToDevice));
    HEARTH_CUDA_CHECK(
        cudaMemcpy(s.x.get(), in.residual.data(), in.residual.size() * 4, cudaMemcpyHostToDevice));
    HEARTH_CUDA_CHECK(
        cudaMemcpy(s.weight.get(), in.weight.data(), in.weight.size() * 4, cudaMemcpyHostToDevice));
    HEARTH_CUDA_CHECK(cudaMemset(s.xn.get(), 0xFF, s.xn.bytes()));  // unwritten rows show
    // Pageable copies may return before their DMA lands; the rank's stream does not wait.
    HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

kernels::AllReduceNorm norm_of(const Side& s, int hidden, Half type) {
  kernels::AllReduceNorm n;
  n.weight = s.weight.get<float>();
  n.hidden = hidden;
  n.eps = 1e-5f;
  n.type = type;
  n.out = s.xn.get();
  return n;
}

// The fused call (norm in the all-reduce's launch, where the group does) or the reference: the
// plain all-reduce, then kernels::rmsnorm of its output, two launches. Either way a norm the
// all-reduce did not write is launched only once every rank's all-reduce is (see the top).
void enqueue(PeerAllReduce& ar, std::vector<Side>& sides, int64_t rows, int hidden, Half type,
             bool fused) {
  std::vector<bool> normed(size_t(ar.ranks()), false);
  for (int r = 0; r < ar.ranks(); ++r) {
    Side& s = sides[size_t(r)];
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    const kernels::AllReduceNorm n = norm_of(s, hidden, type);
    normed[size_t(r)] = ar.run(r, s.partial.get<float>(), s.x.get<float>(), rows * hidden, true,
                               s.stream.get(), fused ? &n : nullptr);
    EXPECT_EQ(normed[size_t(r)], fused && !ar.two_shot(rows * hidden))
        << "rank " << r << ": the all-reduce wrote the norm where it should not, or did not";
  }
  for (int r = 0; r < ar.ranks(); ++r) {
    if (normed[size_t(r)]) continue;
    Side& s = sides[size_t(r)];
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    kernels::rmsnorm(type, s.x.get<float>(), s.weight.get<float>(), int(rows), hidden, 1e-5f,
                     s.xn.get(), s.stream.get());
  }
}

Outputs download(PeerAllReduce& ar, std::vector<Side>& sides, int64_t rows, int hidden) {
  Outputs o;
  const size_t count = size_t(rows) * hidden;
  for (int r = 0; r < ar.ranks(); ++r) {
    Side& s = sides[size_t(r)];
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(s.stream.get()));
    std::vector<float> x(count);
    std::vector<uint8_t> xn(count * 2);
    HEARTH_CUDA_CHECK(cudaMemcpy(x.data(), s.x.get(), count * 4, cudaMemcpyDeviceToHost));
    HEARTH_CUDA_CHECK(cudaMemcpy(xn.data(), s.xn.get(), count * 2, cudaMemcpyDeviceToHost));
    o.x.push_back(std::move(x));
    o.xn.push_back(std::move(xn));
  }
  HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(0)));
  return o;
}

Outputs run(PeerAllReduce& ar, std::vector<Side>& sides, const Inputs& in, int64_t rows, int hidden,
            Half type, bool fused) {
  upload(ar, sides, in);
  enqueue(ar, sides, rows, hidden, type, fused);
  return download(ar, sides, rows, hidden);
}

// The host's residual + rank-order sum, and its rmsnorm (to a 16-bit tolerance: the bytes are
// checked against the GPU's own two launches).
void expect_near_host(const Outputs& got, const Inputs& in, int64_t rows, int hidden, Half type,
                      const std::string& what) {
  std::vector<float> x(in.residual.size());
  for (size_t i = 0; i < x.size(); ++i) {
    float s = in.parts[0][i];
    for (size_t p = 1; p < in.parts.size(); ++p) s += in.parts[p][i];
    x[i] = in.residual[i] + s;
  }
  EXPECT_EQ(std::memcmp(got.x[0].data(), x.data(), x.size() * 4), 0)
      << what << ": the residual differs from the host rank-order sum";
  const auto want = reference::rmsnorm(x, in.weight, int(rows), hidden, 1e-5f);
  std::vector<float> xn(want.size());
  for (size_t i = 0; i < xn.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, got.xn[0].data() + 2 * i, 2);
    xn[i] = test::from_half(h, type);
  }
  EXPECT_LT(test::relative_error(xn, want), 1e-2) << what << ": the norm is off the host's";
}

void expect_same(const Outputs& got, const Outputs& want, const std::string& what) {
  for (size_t r = 0; r < want.x.size(); ++r) {
    EXPECT_EQ(std::memcmp(got.x[r].data(), want.x[r].data(), want.x[r].size() * 4), 0)
        << what << ", rank " << r << ": the residual differs";
    EXPECT_EQ(std::memcmp(got.xn[r].data(), want.xn[r].data(), want.xn[r].size()), 0)
        << what << ", rank " << r << ": the normed rows differ";
    EXPECT_EQ(std::memcmp(got.xn[r].data(), got.xn[0].data(), want.xn[r].size()), 0)
        << what << ", rank " << r << ": differs from rank 0";
  }
}

std::string label(int ranks, Half type, int64_t rows, int hidden, bool two_shot) {
  return std::to_string(ranks) + " ranks, " + (type == Half::BF16 ? "bf16" : "f16") + ", " +
         std::to_string(rows) + " rows of " + std::to_string(hidden) +
         (two_shot ? " (two shots: unfused)" : "");
}

// 4096 (1024 threads a row), 2050 (512 threads, not whole groups of four: the scalar path) and
// 896 (128 threads).
void check_every_shape(int ranks) {
  PeerAllReduce ar(first_devices(ranks), kMaxRows * kMaxHidden);
  auto sides = make_sides(ar);
  for (Half type : {Half::BF16, Half::F16})
    for (int hidden : {4096, 2050, 896})
      for (int64_t rows : {1, 3, 16, 64, 257}) {
        const std::string what =
            label(ranks, type, rows, hidden, ar.two_shot(rows * int64_t(hidden)));
        const Inputs in = random_inputs(ranks, rows * hidden, hidden);
        const Outputs want = run(ar, sides, in, rows, hidden, type, /*fused=*/false);
        const Outputs got = run(ar, sides, in, rows, hidden, type, /*fused=*/true);
        expect_same(got, want, what);
        expect_near_host(got, in, rows, hidden, type, what);
      }
}

TEST(AllReduceNorm, TwoRanksEqualAllReduceThenRmsnorm) {
  HEARTH_REQUIRE_GPUS(2);
  check_every_shape(2);
}

TEST(AllReduceNorm, AllGpusEqualAllReduceThenRmsnorm) {
  HEARTH_REQUIRE_GPUS(3);
  check_every_shape(std::min(gpu_count(), kernels::kMaxAllReduceRanks));
}

// The group's fallback (set_fuse_norm(false)) launches no norm of its own: run() says so and
// leaves norm->out untouched, so the caller can norm once every rank's all-reduce is enqueued.
// First thing in a fresh process (no rmsnorm kernel loaded yet): a norm launched by the group
// between rank 0's all-reduce and rank 1's deadlocked here on the device (lazy loading waited
// for rank 0's all-reduce, which waited for rank 1). Then the caller's norm equals the fused.
TEST(AllReduceNorm, UnfusedGroupLeavesTheNormToTheCaller) {
  HEARTH_REQUIRE_GPUS(2);
  PeerAllReduce ar(first_devices(2), kMaxRows * kMaxHidden);
  auto sides = make_sides(ar);
  for (int64_t rows : {1, 64}) {
    const std::string what = "group fallback, " + std::to_string(rows) + " rows";
    const Inputs in = random_inputs(2, rows * 4096, 4096);
    ar.set_fuse_norm(false);
    upload(ar, sides, in);
    for (int r = 0; r < 2; ++r) {
      Side& s = sides[size_t(r)];
      HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
      const kernels::AllReduceNorm n = norm_of(s, 4096, Half::BF16);
      EXPECT_FALSE(ar.run(r, s.partial.get<float>(), s.x.get<float>(), rows * 4096, true,
                          s.stream.get(), &n))
          << what << ", rank " << r << ": says it wrote the norm";
    }
    const Outputs untouched = download(ar, sides, rows, 4096);
    for (int r = 0; r < 2; ++r)
      for (uint8_t b : untouched.xn[size_t(r)]) {
        ASSERT_EQ(b, 0xFF) << what << ", rank " << r << ": a norm was written";
      }
    for (int r = 0; r < 2; ++r) {
      Side& s = sides[size_t(r)];
      HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
      kernels::rmsnorm(Half::BF16, s.x.get<float>(), s.weight.get<float>(), int(rows), 4096, 1e-5f,
                       s.xn.get(), s.stream.get());
    }
    const Outputs plain = download(ar, sides, rows, 4096);
    ar.set_fuse_norm(true);
    const Outputs fused = run(ar, sides, in, rows, 4096, Half::BF16, true);
    expect_same(fused, plain, what);
    expect_near_host(plain, in, rows, 4096, Half::BF16, what);
  }
}

// Fused and plain calls back to back with no host wait, as a layer runs them: each reuses the
// staging half of its epoch while the other kind may still run on a peer.
TEST(AllReduceNorm, InterleavesWithPlainCalls) {
  HEARTH_REQUIRE_GPUS(2);
  constexpr int kCalls = 6, kHidden = 4096;
  PeerAllReduce ar(first_devices(2), kMaxRows * kHidden);
  std::vector<std::vector<Side>> calls;
  std::vector<Inputs> inputs;
  for (int c = 0; c < kCalls; ++c) {
    calls.push_back(make_sides(ar));
    inputs.push_back(random_inputs(2, (c % 2 ? 3 : 64) * kHidden, kHidden));
    upload(ar, calls.back(), inputs.back());
  }
  // Each rank's calls on the first call's stream: fused at odd calls (3 rows), plain at even.
  for (int c = 0; c < kCalls; ++c)
    for (int r = 0; r < 2; ++r) {
      Side& s = calls[size_t(c)][size_t(r)];
      HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
      const kernels::AllReduceNorm n = norm_of(s, kHidden, Half::BF16);
      ar.run(r, s.partial.get<float>(), s.x.get<float>(),
             int64_t(inputs[size_t(c)].residual.size()), true, calls[0][size_t(r)].stream.get(),
             c % 2 ? &n : nullptr);
    }
  for (int r = 0; r < 2; ++r) {
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(calls[0][size_t(r)].stream.get()));
  }
  for (int c = 1; c < kCalls; c += 2) {
    const Outputs got = download(ar, calls[size_t(c)], 3, kHidden);
    // The residual is the host's sum; the norm what kernels::rmsnorm makes of it now.
    auto& sides = calls[size_t(c)];
    for (int r = 0; r < 2; ++r) {
      HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
      kernels::rmsnorm(Half::BF16, sides[size_t(r)].x.get<float>(),
                       sides[size_t(r)].weight.get<float>(), 3, kHidden, 1e-5f,
                       sides[size_t(r)].xn.get(), sides[size_t(r)].stream.get());
    }
    const Outputs want = download(ar, sides, 3, kHidden);
    expect_same(got, want, "call " + std::to_string(c));
    expect_near_host(got, inputs[size_t(c)], 3, kHidden, Half::BF16, "call " + std::to_string(c));
  }
}

// Captured in each rank's graph (as the decode graphs capture it) and replayed on fresh inputs.
TEST(AllReduceNorm, ReplaysFromCapturedGraphs) {
  HEARTH_REQUIRE_GPUS(2);
  constexpr int64_t kRows = 16;
  constexpr int kHidden = 4096;
  PeerAllReduce ar(first_devices(2), kMaxRows * kHidden);
  auto sides = make_sides(ar);
  std::vector<CudaGraphExec> execs;
  for (int r = 0; r < 2; ++r) {
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    Side& s = sides[size_t(r)];
    HEARTH_CUDA_CHECK(cudaStreamBeginCapture(s.stream.get(), cudaStreamCaptureModeThreadLocal));
    const kernels::AllReduceNorm n = norm_of(s, kHidden, Half::F16);
    ar.run(r, s.partial.get<float>(), s.x.get<float>(), kRows * kHidden, true, s.stream.get(), &n);
    cudaGraph_t g = nullptr;
    HEARTH_CUDA_CHECK(cudaStreamEndCapture(s.stream.get(), &g));
    CudaGraph graph(g);
    cudaGraphExec_t e = nullptr;
    HEARTH_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    execs.emplace_back(e);
  }
  for (int replay = 0; replay < 4; ++replay) {
    const Inputs in = random_inputs(2, kRows * kHidden, kHidden);
    const Outputs want = run(ar, sides, in, kRows, kHidden, Half::F16, /*fused=*/false);
    upload(ar, sides, in);
    for (int r = 0; r < 2; ++r) {
      HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
      HEARTH_CUDA_CHECK(cudaGraphLaunch(execs[size_t(r)].get(), sides[size_t(r)].stream.get()));
    }
    expect_same(download(ar, sides, kRows, kHidden), want, "replay " + std::to_string(replay));
  }
}

TEST(AllReduceNorm, RefusesPartRows) {
  HEARTH_REQUIRE_GPUS(1);
  PeerAllReduce ar({0}, 64);
  DeviceBuffer buf(64 * 4);
  kernels::AllReduceNorm n;
  n.weight = buf.get<float>();
  n.hidden = 10;
  n.out = buf.get();
  EXPECT_THROW(ar.run(0, buf.get<float>(), buf.get<float>(), 64, true, nullptr, &n),
               std::runtime_error);
}

}  // namespace
}  // namespace hearth
