// The fixed-order all-reduce with each rank in its own process on its own GPU
// (worker/engine/cuda/process_all_reduce.h): rank 0 is the test, ranks 1.. are the test binary
// run again as children; the VMM descriptors travel over socketpairs (SCM_RIGHTS) through rank 0.
// Every rank draws every rank's partials from one fresh seed, so each checks its own output
// against the host rank-order sum, bit for bit: one- and two-shot counts (two shots need three
// ranks), repeats, replays of a captured graph, and the all-reduce that norms its rows against
// the all-reduce then rmsnorm. Skips with fewer than 2 GPUs.
#include <sys/socket.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "ipc/child_process.h"
#include "ipc/fd_passing.h"
#include "kernels/cuda_handles.h"
#include "kernels/all_reduce.h"
#include "kernels/device_buffer.h"
#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/temp_dir.h"
#include "worker/engine/cuda/process_all_reduce.h"

namespace hearth {
namespace {

constexpr const char* kRankEnv = "HEARTH_TEST_AR_RANK";
constexpr const char* kRanksEnv = "HEARTH_TEST_AR_RANKS";
constexpr const char* kSeedEnv = "HEARTH_TEST_AR_SEED";
// Set in a child that imports its peers, then exits without ever running the all-reduce.
constexpr const char* kVanishEnv = "HEARTH_TEST_AR_VANISH";
constexpr int64_t kMaxFloats = int64_t(1) << 20;  // 4 MiB: two shots from here on

void send_share(int socket, const AllReduceShare& share, int fd) {
  const int fds[] = {fd};
  const auto r = ipc::send_with_fds(socket, {reinterpret_cast<const char*>(&share), sizeof share},
                                    std::span<const int>(fds));
  ASSERT_EQ(r.status, ipc::IoStatus::kOk);
  ASSERT_EQ(r.bytes, sizeof share);
}

// One share and its descriptor (the sockets are SOCK_SEQPACKET: one message each).
AllReduceShare receive_share(int socket, UniqueFd& fd) {
  AllReduceShare share;
  std::vector<UniqueFd> fds;
  const auto r =
      ipc::receive_with_fds(socket, {reinterpret_cast<char*>(&share), sizeof share}, fds);
  if (r.status != ipc::IoStatus::kOk || r.bytes != sizeof share || fds.size() != 1)
    throw std::runtime_error("no all-reduce share from the peer (did it fail?)");
  fd = std::move(fds[0]);
  return share;
}

// Rank p's partial (or, for p = -1, the replicated residual) at call `call`, from the seed.
std::vector<float> draw(unsigned seed, int p, int call, int64_t count) {
  std::mt19937 gen(seed * 1000003u + unsigned(call) * 131u + unsigned(p + 1));
  std::normal_distribution<float> d(0.0f, p < 0 ? 4.0f : 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = d(gen);
  return v;
}

// residual + (((p0 + p1) + p2) + ...), each add rounded in fp32, `times` times over.
std::vector<float> host_sum(unsigned seed, int ranks, int call, int64_t count, bool accumulate,
                            int times = 1) {
  std::vector<std::vector<float>> parts;
  for (int p = 0; p < ranks; ++p) parts.push_back(draw(seed, p, call, count));
  std::vector<float> out = draw(seed, -1, call, count);
  for (int t = 0; t < times; ++t)
    for (size_t i = 0; i < out.size(); ++i) {
      float s = parts[0][i];
      for (int p = 1; p < ranks; ++p) s += parts[size_t(p)][i];
      out[i] = accumulate ? out[i] + s : s;
    }
  return out;
}

struct Buffers {
  DeviceBuffer partial{size_t(kMaxFloats) * 4}, out{size_t(kMaxFloats) * 4};
  CudaStream stream = make_stream();
};

void upload(Buffers& b, unsigned seed, int rank, int call, int64_t count) {
  const auto partial = draw(seed, rank, call, count);
  const auto residual = draw(seed, -1, call, count);
  HEARTH_CUDA_CHECK(
      cudaMemcpy(b.partial.get(), partial.data(), size_t(count) * 4, cudaMemcpyHostToDevice));
  HEARTH_CUDA_CHECK(
      cudaMemcpy(b.out.get(), residual.data(), size_t(count) * 4, cudaMemcpyHostToDevice));
  HEARTH_CUDA_CHECK(cudaDeviceSynchronize());  // the rank's stream does not wait for these
}

void expect_out(Buffers& b, const std::vector<float>& want, const std::string& what) {
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(b.stream.get()));
  std::vector<float> got(want.size());
  HEARTH_CUDA_CHECK(cudaMemcpy(got.data(), b.out.get(), got.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
      << what << ": differs from the host rank-order sum";
}

// What every rank does, in the same order: the calls must match one for one.
void run_script(ProcessAllReduce& ar, unsigned seed) {
  ASSERT_TRUE(ar.ready());
  HEARTH_CUDA_CHECK(cudaSetDevice(ar.device()));
  Buffers b;
  const std::string me = "rank " + std::to_string(ar.rank()) + " of " + std::to_string(ar.ranks());
  int call = 0;
  // Decode-sized to prefill-sized; odd counts take the scalar tail; the largest two shots when
  // three or more ranks.
  for (int64_t count : {int64_t(1), int64_t(4093), int64_t(64 * 4096), kMaxFloats - 1, kMaxFloats})
    for (bool accumulate : {true, false})
      for (int repeat = 0; repeat < 3; ++repeat, ++call) {
        upload(b, seed, ar.rank(), call, count);
        ar.run(b.partial.get<float>(), b.out.get<float>(), count, accumulate, b.stream.get());
        expect_out(b, host_sum(seed, ar.ranks(), call, count, accumulate),
                   me + ", " + std::to_string(count) + " floats" +
                       (ar.two_shot(count) ? " (two shots)" : "") + ", repeat " +
                       std::to_string(repeat));
      }
  // Three all-reduces captured in one graph, replayed on fresh inputs: the epochs advance on the
  // device with no host call.
  for (int64_t count : {int64_t(8 * 4096), kMaxFloats}) {
    cudaStream_t s = b.stream.get();
    HEARTH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < 3; ++k) ar.run(b.partial.get<float>(), b.out.get<float>(), count, true, s);
    cudaGraph_t g = nullptr;
    HEARTH_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CudaGraph graph(g);
    cudaGraphExec_t e = nullptr;
    HEARTH_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    CudaGraphExec exec(e);
    for (int replay = 0; replay < 4; ++replay, ++call) {
      upload(b, seed, ar.rank(), call, count);
      HEARTH_CUDA_CHECK(cudaGraphLaunch(exec.get(), s));
      expect_out(b, host_sum(seed, ar.ranks(), call, count, true, 3),
                 me + ", graph replay " + std::to_string(replay) + " of " + std::to_string(count) +
                     " floats");
    }
  }
  // With a norm: the one-shot launch that norms its rows and two launches (set_fuse_norm(false):
  // the group leaves the norm to the caller, here kernels::rmsnorm) give the same bytes.
  DeviceBuffer weight(4096 * 4), xn_fused(size_t(kMaxFloats) * 2), xn_plain(size_t(kMaxFloats) * 2);
  for (kernels::Half type : {kernels::Half::BF16, kernels::Half::F16})
    for (int hidden : {4096, 2050})
      for (int64_t rows : {1, 3, 64, 255}) {
        const int64_t count = rows * hidden;
        const std::string what = me + ", norm of " + std::to_string(rows) + " rows of " +
                                 std::to_string(hidden) +
                                 (type == kernels::Half::BF16 ? " bf16" : " f16");
        const auto w = draw(seed, -2, call, hidden);
        HEARTH_CUDA_CHECK(
            cudaMemcpy(weight.get(), w.data(), size_t(hidden) * 4, cudaMemcpyHostToDevice));
        kernels::AllReduceNorm n;
        n.weight = weight.get<float>();
        n.hidden = hidden;
        n.eps = 1e-5f;
        n.type = type;
        const auto want = host_sum(seed, ar.ranks(), call, count, true);
        std::vector<std::vector<uint8_t>> normed;
        for (bool fuse : {true, false}) {
          n.out = fuse ? xn_fused.get() : xn_plain.get();
          ar.set_fuse_norm(fuse);
          upload(b, seed, ar.rank(), call, count);
          const bool wrote =
              ar.run(b.partial.get<float>(), b.out.get<float>(), count, true, b.stream.get(), &n);
          EXPECT_EQ(wrote, fuse && !ar.two_shot(count)) << what;
          if (!wrote)
            kernels::rmsnorm(type, b.out.get<float>(), n.weight, int(rows), hidden, n.eps, n.out,
                             b.stream.get());
          expect_out(b, want, what + (fuse ? ", fused" : ", two launches"));
          std::vector<uint8_t> bytes(size_t(count) * 2);
          HEARTH_CUDA_CHECK(cudaMemcpy(bytes.data(), n.out, bytes.size(), cudaMemcpyDeviceToHost));
          normed.push_back(std::move(bytes));
        }
        ar.set_fuse_norm(true);
        EXPECT_EQ(std::memcmp(normed[0].data(), normed[1].data(), normed[0].size()), 0)
            << what << ": the fused norm differs from the all-reduce then rmsnorm";
        ++call;
      }
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A child rank: its buffers to rank 0 over stdin (a SOCK_SEQPACKET end), its peers' back.
void child_rank(int rank, int ranks, unsigned seed) {
  ProcessAllReduce ar(rank, ranks, rank, kMaxFloats);
  const UniqueFd mine = ar.export_fd();
  send_share(0, ar.share(), mine.get());
  for (int i = 0; i < ranks - 1; ++i) {
    UniqueFd fd;
    const AllReduceShare share = receive_share(0, fd);
    ar.import_peer(share, fd.get());
  }
  if (std::getenv(kVanishEnv)) return;
  run_script(ar, seed);
}

// Rank 0 here, ranks 1..n-1 as children running the test `name`; rank 0 relays every share.
// With `vanish`, the children exit once they have imported, and rank 0's all-reduce must fail.
void run_group(int ranks, const std::string& name, bool vanish = false) {
  if (const char* rank = std::getenv(kRankEnv)) {
    child_rank(std::atoi(rank), std::atoi(std::getenv(kRanksEnv)),
               unsigned(std::strtoul(std::getenv(kSeedEnv), nullptr, 10)));
    return;
  }
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::TempDir tmp;
  ProcessAllReduce ar(0, ranks, 0, kMaxFloats);
  std::vector<UniqueFd> sockets;
  std::vector<ChildProcess> children;
  for (int r = 1; r < ranks; ++r) {
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    UniqueFd theirs(pair[1]);
    sockets.emplace_back(pair[0]);
    const std::string log = (tmp / ("rank" + std::to_string(r))).string();
    std::vector<std::string> env = {std::string(kRankEnv) + "=" + std::to_string(r),
                                    std::string(kRanksEnv) + "=" + std::to_string(ranks),
                                    std::string(kSeedEnv) + "=" + std::to_string(seed)};
    if (vanish) env.push_back(std::string(kVanishEnv) + "=1");
    children.push_back(ChildProcess::spawn(
        ChildProcess::Options(
            {std::filesystem::read_symlink("/proc/self/exe").string(), "--gtest_filter=" + name})
            .with_env(env)
            .stdin_from(ChildProcess::Stream::descriptor(theirs.get()))
            .stdout_to(ChildProcess::Stream::file(log))
            .stderr_to(ChildProcess::Stream::file(log + ".err"))));
  }
  std::vector<AllReduceShare> shares(static_cast<size_t>(ranks));
  std::vector<UniqueFd> fds(static_cast<size_t>(ranks));
  shares[0] = ar.share();
  fds[0] = ar.export_fd();
  for (int r = 1; r < ranks; ++r)
    shares[size_t(r)] = receive_share(sockets[size_t(r - 1)].get(), fds[size_t(r)]);
  for (int r = 1; r < ranks; ++r)
    for (int p = 0; p < ranks; ++p)
      if (p != r) send_share(sockets[size_t(r - 1)].get(), shares[size_t(p)], fds[size_t(p)].get());
  for (int p = 1; p < ranks; ++p) ar.import_peer(shares[size_t(p)], fds[size_t(p)].get());
  if (vanish) {
    for (auto& child : children) ASSERT_TRUE(child.wait().success());
    // Its peers are gone for good (their memory stays mapped here): the kernel gives up after
    // its ~10 s wait and the error reaches the host, rather than a hang.
    HEARTH_CUDA_CHECK(cudaSetDevice(ar.device()));
    Buffers b;
    upload(b, seed, 0, 0, 4096);
    ar.run(b.partial.get<float>(), b.out.get<float>(), 4096, true, b.stream.get());
    EXPECT_NE(cudaStreamSynchronize(b.stream.get()), cudaSuccess);
    return;
  }
  run_script(ar, seed);
  for (int r = 1; r < ranks; ++r) {
    const auto log = tmp / ("rank" + std::to_string(r));
    const ExitStatus status = children[size_t(r - 1)].wait();
    EXPECT_TRUE(status.success()) << "rank " << r << ": " << status.describe() << "\n"
                                  << read_all(log) << read_all(log.string() + ".err");
    // It ran, and was not skipped.
    EXPECT_NE(read_all(log).find("[       OK ] " + name), std::string::npos) << read_all(log);
  }
}

TEST(ProcessAllReduce, TwoProcessesEqualTheHostRankOrderSum) {
  if (!std::getenv(kRankEnv)) HEARTH_REQUIRE_GPUS(2);
  run_group(2, "ProcessAllReduce.TwoProcessesEqualTheHostRankOrderSum");
}

// Three or more ranks: the largest counts take two shots.
TEST(ProcessAllReduce, AProcessPerGpuEqualsTheHostRankOrderSum) {
  if (!std::getenv(kRankEnv)) HEARTH_REQUIRE_GPUS(3);
  run_group(std::min(test::gpu_count(), kernels::kMaxAllReduceRanks),
            "ProcessAllReduce.AProcessPerGpuEqualsTheHostRankOrderSum");
}

// The CUDA context of this test is lost after the trap: it runs in a process of its own (ctest
// runs each case alone).
TEST(ProcessAllReduce, APeerThatNeverComesFailsTheKernelInsteadOfHanging) {
  if (!std::getenv(kRankEnv)) HEARTH_REQUIRE_GPUS(2);
  run_group(2, "ProcessAllReduce.APeerThatNeverComesFailsTheKernelInsteadOfHanging",
            /*vanish=*/true);
}

TEST(ProcessAllReduce, RefusesSharesThatDoNotFitAndRunsOnlyWhenComplete) {
  HEARTH_REQUIRE_GPU();
  ProcessAllReduce a(0, 2, 0, 1024), b(1, 2, 0, 2048), c(1, 2, 0, 1024);
  EXPECT_FALSE(a.ready());
  DeviceBuffer buf(1024 * 4);
  EXPECT_THROW(a.run(buf.get<float>(), buf.get<float>(), 16, true, nullptr), std::runtime_error);
  const UniqueFd bfd = b.export_fd(), cfd = c.export_fd(), afd = a.export_fd();
  EXPECT_THROW(a.import_peer(b.share(), bfd.get()), std::runtime_error);  // capacity
  EXPECT_THROW(a.import_peer(a.share(), afd.get()), std::runtime_error);  // itself
  AllReduceShare three = c.share();
  three.ranks = 3;
  EXPECT_THROW(a.import_peer(three, cfd.get()), std::runtime_error);
  a.import_peer(c.share(), cfd.get());
  EXPECT_TRUE(a.ready());
  EXPECT_THROW(a.import_peer(c.share(), cfd.get()), std::runtime_error);  // twice
  EXPECT_THROW(a.run(buf.get<float>(), buf.get<float>(), 4096, true, nullptr),
               std::runtime_error);  // past the capacity
  EXPECT_THROW(ProcessAllReduce(0, 2, test::gpu_count(), 16), std::runtime_error);
}

}  // namespace
}  // namespace hearth
