// The fixed-order all-reduce (kernels/peer_all_reduce.h) against a host sum in rank order, on
// fresh random inputs: bitwise on every rank, at every row count, repeated, and replayed from
// CUDA graphs. Multi-rank cases skip with fewer than 2 GPUs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/all_reduce.h"
#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"
#include "kernels/peer_all_reduce.h"
#include "tests/kernels/gpu_test_util.h"

namespace hearth {
namespace {

using kernels::PeerAllReduce;

using test::gpu_count;

constexpr int64_t kCols = 4096;
constexpr int64_t kMaxRows = 2048;

// Rank r's partial and output buffers and stream, on its device.
struct RankSide {
  DeviceBuffer partial, out;
  CudaStream stream;
};

std::vector<RankSide> make_sides(const PeerAllReduce& ar, int64_t floats) {
  std::vector<RankSide> sides;
  for (int r = 0; r < ar.ranks(); ++r) {
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    sides.push_back(
        {DeviceBuffer(size_t(floats) * 4), DeviceBuffer(size_t(floats) * 4), make_stream()});
  }
  HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(0)));
  return sides;
}

// The CPU engine's arithmetic: residual + (((p0 + p1) + p2) + ...), each add rounded in fp32.
std::vector<float> host_sum(const std::vector<std::vector<float>>& parts,
                            const std::vector<float>& residual, bool accumulate) {
  std::vector<float> out(parts[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    float s = parts[0][i];
    for (size_t p = 1; p < parts.size(); ++p) s += parts[p][i];
    out[i] = accumulate ? residual[i] + s : s;
  }
  return out;
}

// Uploads fresh partials and one residual (every rank holds the same residual, as the engine's
// replicated hidden state), runs the all-reduce on every rank, returns each rank's output.
std::vector<std::vector<float>> run_once(PeerAllReduce& ar, std::vector<RankSide>& sides,
                                         const std::vector<std::vector<float>>& parts,
                                         const std::vector<float>& residual, bool accumulate,
                                         bool launch = true, int misaligned_rank = -1) {
  const int64_t count = int64_t(residual.size());
  // The misaligned rank's buffers start one float in: not 16-byte aligned.
  auto partial = [&](int r) {
    return sides[size_t(r)].partial.get<float>() + (r == misaligned_rank);
  };
  auto out = [&](int r) { return sides[size_t(r)].out.get<float>() + (r == misaligned_rank); };
  for (int r = 0; r < ar.ranks(); ++r) {
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    HEARTH_CUDA_CHECK(
        cudaMemcpy(partial(r), parts[size_t(r)].data(), size_t(count) * 4, cudaMemcpyHostToDevice));
    HEARTH_CUDA_CHECK(
        cudaMemcpy(out(r), residual.data(), size_t(count) * 4, cudaMemcpyHostToDevice));
    // A copy from pageable memory may return before its DMA lands, and the rank's stream does
    // not wait for the legacy stream: without this the kernel could read the last run's data.
    HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
  }
  if (launch)
    for (int r = 0; r < ar.ranks(); ++r)
      ar.run(r, partial(r), out(r), count, accumulate, sides[size_t(r)].stream.get());
  std::vector<std::vector<float>> outs;
  for (int r = 0; r < ar.ranks(); ++r) {
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(sides[size_t(r)].stream.get()));
    std::vector<float> o(static_cast<size_t>(count));
    HEARTH_CUDA_CHECK(cudaMemcpy(o.data(), out(r), size_t(count) * 4, cudaMemcpyDeviceToHost));
    outs.push_back(std::move(o));
  }
  HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(0)));
  return outs;
}

std::vector<std::vector<float>> random_parts(int ranks, int64_t count) {
  std::vector<std::vector<float>> parts;
  for (int r = 0; r < ranks; ++r) parts.push_back(test::random_floats(size_t(count)));
  return parts;
}

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
      << what << ": differs from the host rank-order sum";
}

std::vector<int> first_devices(int n) {
  std::vector<int> d;
  for (int i = 0; i < n; ++i) d.push_back(i);
  return d;
}

// Every row count from decode to prefill, plus counts that take the scalar path.
void check_every_size(
    int ranks, int64_t two_shot_min_bytes = kernels::AllReduceGroup::kDefaultTwoShotMinBytes) {
  PeerAllReduce ar(first_devices(ranks), kMaxRows * kCols, two_shot_min_bytes);
  auto sides = make_sides(ar, kMaxRows * kCols);
  for (int64_t rows : {1, 2, 3, 7, 16, 64, 255, 512, 1024, 2048}) {
    for (bool accumulate : {true, false}) {
      const int64_t count = rows * kCols - (rows % 2 ? 1 : 0);  // odd rows: not a multiple of 4
      const auto parts = random_parts(ranks, count);
      const auto residual = test::random_floats(size_t(count), 4.0f);
      const auto want = host_sum(parts, residual, accumulate);
      const auto outs = run_once(ar, sides, parts, residual, accumulate);
      for (int r = 0; r < ranks; ++r)
        expect_bitwise(outs[size_t(r)], want,
                       "rank " + std::to_string(r) + " of " + std::to_string(ranks) + ", " +
                           std::to_string(count) + " floats");
    }
  }
}

TEST(PeerAllReduce, OneRankIsTheResidualPlusItsPartial) {
  HEARTH_REQUIRE_GPUS(1);
  check_every_size(1);
}

TEST(PeerAllReduce, TwoRanksEqualTheHostRankOrderSum) {
  HEARTH_REQUIRE_GPUS(2);
  check_every_size(2);
}

TEST(PeerAllReduce, AllGpusEqualTheHostRankOrderSum) {
  HEARTH_REQUIRE_GPUS(3);
  check_every_size(std::min(gpu_count(), kernels::kMaxAllReduceRanks));
}

// Two shots (reduce-scatter, then all-gather) at every size, also where the groups do not split
// evenly over the ranks (three): the same bits as the host's rank-order sum.
TEST(PeerAllReduce, TwoShotsEqualTheHostRankOrderSum) {
  HEARTH_REQUIRE_GPUS(3);
  ASSERT_TRUE(PeerAllReduce(first_devices(3), 4, /*two_shot_min_bytes=*/0).two_shot(1));
  check_every_size(3, /*two_shot_min_bytes=*/0);
  if (gpu_count() > 3) check_every_size(std::min(gpu_count(), kernels::kMaxAllReduceRanks), 0);
}

// One- and two-shot calls back to back with no host wait between them: each reads and writes
// the staging half of its epoch while the other kind may still run on a peer.
TEST(PeerAllReduce, OneAndTwoShotCallsInterleave) {
  HEARTH_REQUIRE_GPUS(3);
  const int ranks = std::min(gpu_count(), kernels::kMaxAllReduceRanks);
  constexpr int kCalls = 8;
  const int64_t big = 512 * kCols, small = 1 * kCols + 3;
  PeerAllReduce ar(first_devices(ranks), big);
  ASSERT_TRUE(ar.two_shot(big));
  ASSERT_FALSE(ar.two_shot(small));
  std::vector<std::vector<RankSide>> calls;
  std::vector<std::vector<std::vector<float>>> parts;
  std::vector<std::vector<float>> residuals;
  for (int c = 0; c < kCalls; ++c) {
    const int64_t count = c % 2 ? small : big;
    calls.push_back(make_sides(ar, count));
    parts.push_back(random_parts(ranks, count));
    residuals.push_back(test::random_floats(size_t(count), 4.0f));
    run_once(ar, calls.back(), parts.back(), residuals.back(), true, /*launch=*/false);
  }
  // Every call on one stream per rank (the first call's), each rank's calls launched in turn.
  for (int c = 0; c < kCalls; ++c)
    for (int r = 0; r < ranks; ++r)
      ar.run(r, calls[size_t(c)][size_t(r)].partial.get<float>(),
             calls[size_t(c)][size_t(r)].out.get<float>(), int64_t(residuals[size_t(c)].size()),
             true, calls[0][size_t(r)].stream.get());
  for (int r = 0; r < ranks; ++r) {
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(calls[0][size_t(r)].stream.get()));
  }
  for (int c = 0; c < kCalls; ++c) {
    const auto want = host_sum(parts[size_t(c)], residuals[size_t(c)], true);
    for (int r = 0; r < ranks; ++r) {
      HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
      std::vector<float> o(want.size());
      HEARTH_CUDA_CHECK(cudaMemcpy(o.data(), calls[size_t(c)][size_t(r)].out.get(), o.size() * 4,
                                   cudaMemcpyDeviceToHost));
      expect_bitwise(o, want, "call " + std::to_string(c) + " rank " + std::to_string(r));
    }
  }
  HEARTH_CUDA_CHECK(cudaSetDevice(0));
}

TEST(PeerAllReduce, OneRankMisalignedStillSumsTheSameElements) {
  HEARTH_REQUIRE_GPUS(2);
  PeerAllReduce ar(first_devices(2), 64 * kCols);
  auto sides = make_sides(ar, 64 * kCols);
  for (int64_t count : {int64_t(4), int64_t(7), 33 * kCols, 64 * kCols - 1}) {
    const auto parts = random_parts(2, count);
    const auto residual = test::random_floats(size_t(count), 4.0f);
    const auto want = host_sum(parts, residual, true);
    const auto outs = run_once(ar, sides, parts, residual, true, true, /*misaligned_rank=*/1);
    for (int r = 0; r < 2; ++r)
      expect_bitwise(outs[size_t(r)], want, "rank " + std::to_string(r) + ", rank 1 misaligned");
  }
  if (gpu_count() < 3) return;
  PeerAllReduce three(first_devices(3), 64 * kCols, /*two_shot_min_bytes=*/0);
  auto three_sides = make_sides(three, 64 * kCols);
  for (int64_t count : {int64_t(7), 64 * kCols - 1}) {
    const auto parts = random_parts(3, count);
    const auto residual = test::random_floats(size_t(count), 4.0f);
    const auto want = host_sum(parts, residual, true);
    const auto outs = run_once(three, three_sides, parts, residual, true, true, 1);
    for (int r = 0; r < 3; ++r)
      expect_bitwise(outs[size_t(r)], want, "two shots, rank " + std::to_string(r));
  }
}

TEST(PeerAllReduce, RepeatRunsAreIdentical) {
  HEARTH_REQUIRE_GPUS(2);
  const int ranks = std::min(gpu_count(), kernels::kMaxAllReduceRanks);
  PeerAllReduce ar(first_devices(ranks), 64 * kCols);
  auto sides = make_sides(ar, 64 * kCols);
  const auto parts = random_parts(ranks, 64 * kCols);
  const auto residual = test::random_floats(size_t(64 * kCols), 4.0f);
  const auto first = run_once(ar, sides, parts, residual, true);
  for (int i = 0; i < 20; ++i) {
    const auto again = run_once(ar, sides, parts, residual, true);
    for (int r = 0; r < ranks; ++r) expect_bitwise(again[size_t(r)], first[0], "repeat");
  }
}

TEST(PeerAllReduce, ReplaysFromCapturedGraphs) {
  HEARTH_REQUIRE_GPUS(2);
  const int ranks = 2;
  const int64_t count = 8 * kCols;
  PeerAllReduce ar(first_devices(ranks), count);
  auto sides = make_sides(ar, count);
  // Each rank's stream captured into its own graph: three all-reduces in a row, the epoch
  // counters advancing on the device at every replay with no host involvement.
  std::vector<CudaGraphExec> execs;
  for (int r = 0; r < ranks; ++r) {
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
    cudaStream_t s = sides[size_t(r)].stream.get();
    HEARTH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < 3; ++k)
      ar.run(r, sides[size_t(r)].partial.get<float>(), sides[size_t(r)].out.get<float>(), count,
             true, s);
    cudaGraph_t g = nullptr;
    HEARTH_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CudaGraph graph(g);
    cudaGraphExec_t e = nullptr;
    HEARTH_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    execs.emplace_back(e);
  }
  for (int replay = 0; replay < 5; ++replay) {
    const auto parts = random_parts(ranks, count);
    const auto residual = test::random_floats(size_t(count), 4.0f);
    // Upload, then launch each rank's graph: out = residual + 3 * (p0 + p1), summed stepwise.
    run_once(ar, sides, parts, residual, true, /*launch=*/false);
    for (int r = 0; r < ranks; ++r) {
      HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
      HEARTH_CUDA_CHECK(cudaGraphLaunch(execs[size_t(r)].get(), sides[size_t(r)].stream.get()));
    }
    auto want = residual;
    for (int k = 0; k < 3; ++k) want = host_sum(parts, want, true);
    for (int r = 0; r < ranks; ++r) {
      HEARTH_CUDA_CHECK(cudaSetDevice(ar.device(r)));
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(sides[size_t(r)].stream.get()));
      std::vector<float> o(static_cast<size_t>(count));
      HEARTH_CUDA_CHECK(cudaMemcpy(o.data(), sides[size_t(r)].out.get(), size_t(count) * 4,
                                   cudaMemcpyDeviceToHost));
      expect_bitwise(o, want,
                     "graph replay " + std::to_string(replay) + " rank " + std::to_string(r));
    }
  }
  HEARTH_CUDA_CHECK(cudaSetDevice(0));
}

TEST(PeerAllReduce, RefusesMoreGpusThanPresentAndOversizedCounts) {
  HEARTH_REQUIRE_GPUS(1);
  EXPECT_THROW(PeerAllReduce(first_devices(gpu_count() + 1), 16), std::runtime_error);
  PeerAllReduce ar({0}, 16);
  DeviceBuffer buf(64 * 4);
  EXPECT_THROW(ar.run(0, buf.get<float>(), buf.get<float>(), 64, true, nullptr),
               std::runtime_error);
}

}  // namespace
}  // namespace hearth
