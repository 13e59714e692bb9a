// Prefix KV shared across workers on the GPU (issue 22 items 3 and 4): chunks from a vmm server,
// leased pools on device ranges. Worker B finds the block worker A published and maps A's chunk
// past its own pool with read-only device access: a kernel and a copy read A's bytes there, the
// driver reports read-only access for B and read-write for A, and a write through B's mapping
// (in a child process, whose context the fault ends) changes nothing. As processes: a served
// CUDA worker reads the prompt prefix another computed, with the tokens and logprobs of
// computing it itself; one SIGKILLed while it generates returns its lease, and a worker beside
// it keeps its tokens.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "kernels/batch_ops.h"
#include "tests/support/vmm_kv_server.h"
#include "worker/leased_kv_memory.h"
#include "tests/weight-server/daemon/server_test_support.h"
#include "weight-server/model/cuda_driver.h"
#include "weight-server/sharing/vmm_backend.h"

namespace hearth {
namespace {

using json = nlohmann::json;
constexpr int64_t kBlock = int64_t(1) << 20;  // 1 MiB: a 2 MiB chunk holds two
constexpr int kRefused = 42, kWritten = 43;

#define REQUIRE_GPU()                                  \
  do {                                                 \
    std::string why;                                   \
    if (!vmm_gpu_available(&why)) GTEST_SKIP() << why; \
  } while (0)

// The access the driver grants device 0 at `p`.
unsigned long long device_access(const std::byte* p) {
  CUmemLocation device{};
  device.type = CU_MEM_LOCATION_TYPE_DEVICE;
  device.id = 0;
  unsigned long long flags = 0;
  check_cu(CudaDriver::get().get_access(&flags, &device, CUdeviceptr(p)), "cuMemGetAccess");
  return flags;
}

std::vector<std::byte> read_back(const std::byte* p, size_t n) {
  std::vector<std::byte> out(n);
  if (cudaMemcpy(out.data(), p, n, cudaMemcpyDeviceToHost) != cudaSuccess)
    throw std::runtime_error("cannot read device memory back");
  return out;
}

// In a child process: writes through `p` and says whether the device let it.
[[noreturn]] void write_and_exit(std::byte* p) {
  const cudaError_t set = cudaMemset(p, 0x5a, 4096);
  const cudaError_t sync = cudaDeviceSynchronize();
  if (set != cudaSuccess || sync != cudaSuccess) {
    std::fprintf(stderr, "write refused: %s\n",
                 cudaGetErrorString(set != cudaSuccess ? set : sync));
    std::_Exit(kRefused);
  }
  std::_Exit(kWritten);
}

class SharedKvVmm : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    server_ = std::make_unique<test::VmmKvServer>();
  }
  std::unique_ptr<LeasedKvMemory> pool(int max_blocks, int min_blocks, BlockKey domain) {
    return std::make_unique<LeasedKvMemory>(server_->client(), kBlock, max_blocks, min_blocks,
                                            test::VmmKvServer::device_range(),
                                            LeasedKvSharing{domain, 2});
  }
  std::unique_ptr<test::VmmKvServer> server_;
  std::mt19937_64 rng_{std::random_device{}()};
};

TEST_F(SharedKvVmm, WorkerBReadsWorkerAsBlockThroughAReadOnlyDeviceMapping) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts its own CUDA context
  const BlockKey domain{3, 4}, root{5, 6};
  auto a = pool(8, 8, domain), b = pool(8, 4, domain), other = pool(8, 2, {3, 5});
  ASSERT_EQ(a->blocks(), 8);
  ASSERT_EQ(b->first_foreign_block(), 8);
  ASSERT_EQ(b->foreign_capacity(), 4);

  // A's block 5 (the second half of its third chunk), random, from the host.
  std::vector<std::byte> bytes(kBlock);
  for (std::byte& x : bytes) x = std::byte(rng_());
  std::byte* const own = a->base() + 5 * kBlock;
  ASSERT_EQ(cudaMemcpy(own, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<int32_t> tokens(16);
  for (int32_t& t : tokens) t = int32_t(rng_() % 1000);
  const BlockKey key{rng_(), rng_()};
  const std::vector<SharedKvBlock> published{{5, key, root, tokens}};
  EXPECT_EQ(a->publish(published), 1u);

  const std::vector<SharedKvLink> chain{{key, tokens}};
  const std::vector<int32_t> found = b->find(root, chain);
  ASSERT_EQ(found.size(), 1u);
  ASSERT_GE(found[0], b->first_foreign_block());
  ASSERT_LT(found[0], b->first_foreign_block() + b->foreign_capacity());
  EXPECT_TRUE(other->find(root, chain).empty());  // another cache domain

  std::byte* const mapped = b->base() + int64_t(found[0]) * kBlock;
  EXPECT_EQ(device_access(mapped), CU_MEM_ACCESS_FLAGS_PROT_READ);
  EXPECT_EQ(device_access(own), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(read_back(mapped, kBlock), bytes);

  // A kernel reads the foreign block as floats into B's own block 0, rows in random order.
  constexpr int kHidden = 1024;
  constexpr int kRows = int(kBlock / (kHidden * sizeof(float)));
  std::vector<int32_t> idx(kRows);
  for (int r = 0; r < kRows; ++r) idx[r] = int32_t(rng_() % kRows);
  int32_t* d_idx = nullptr;
  ASSERT_EQ(cudaMalloc(&d_idx, sizeof(idx[0]) * kRows), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_idx, idx.data(), sizeof(idx[0]) * kRows, cudaMemcpyHostToDevice),
            cudaSuccess);
  kernels::gather_rows(reinterpret_cast<const float*>(mapped), d_idx, kRows, kHidden,
                       reinterpret_cast<float*>(b->base()), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(d_idx);
  const std::vector<std::byte> gathered = read_back(b->base(), kBlock);
  const size_t row = kHidden * sizeof(float);
  for (int r = 0; r < kRows; ++r)
    ASSERT_EQ(std::memcmp(gathered.data() + r * row, bytes.data() + size_t(idx[r]) * row, row), 0)
        << "row " << r;

  // A write through B's mapping faults (in a child: the fault ends its context), and A's block
  // still holds what A wrote.
  // Refused: an error from the copy or the sync, or the process ended by the fault itself.
  const auto refused = [](int status) {
    return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == kRefused);
  };
  EXPECT_EXIT(write_and_exit(mapped), refused, "");
  EXPECT_EQ(read_back(own, kBlock), bytes);

  // A writes its block again only once B gave it back.
  const std::vector<int32_t> mine{5};
  EXPECT_TRUE(a->withdraw(mine).empty());
  b->release(found);
  EXPECT_EQ(a->withdraw(mine), mine);
}

// Long enough for several full blocks on the tiny model's tokenizer, short of its context.
const std::string kPrompt =
    "The lighthouse keeper wrote in his log every evening: the wind, the ships, the birds that "
    "rested on the rail, the colour of the sea at dusk, and the names of the stars he could see "
    "before the lamp was lit. Tonight he wrote:";

// One served CUDA worker run over one sampled request with logprobs, to completion.
test::Stream run_served(const test::ServerProcess& server, const test::TempDir& dir,
                        std::vector<std::string> extra = {}) {
  const std::string requests = dir / "p.jsonl";
  std::ofstream(requests) << json{{"id", "p"},         {"prompt", kPrompt}, {"temperature", 0.8},
                                  {"seed", 3},         {"logprobs", 3},     {"max_tokens", 24},
                                  {"ignore_eos", true}}
                                 .dump()
                          << "\n";
  std::vector<std::string> args = {"--server",   server.socket(), "--model",  "tiny",
                                   "--backend",  "cuda",          "--format", "jsonl",
                                   "--requests", requests};
  args.insert(args.end(), extra.begin(), extra.end());
  const test::WorkerRun run = test::run_worker(dir, args);
  EXPECT_TRUE(run.status.exited_with(0)) << run.err;
  return test::parse_stream(run.out);
}

// Two served CUDA workers, one after the other, on one vmm server: the second reads every full
// block of the prompt the first computed (its chunks, kept by the server for their published
// blocks, mapped read-only), and its tokens and logprobs are those of a worker with kv_share
// off, which computes the prompt itself.
TEST(SharedKvVmmProcess, WorkerBReadsThePrefixWorkerAComputedWithTheSameTokens) {
  REQUIRE_GPU();
  test::ServerProcess server(
      {"--backend", "vmm", "--model", test::tiny_model_dir().string() + ":tiny"});
  test::TempDir dir;
  // A's prompt goes one block per step, steps with nothing to sample: each publishes its block
  // only once the stream finished it.
  const test::Stream a = run_served(server, dir, {"--set", "max_batch_tokens=16"});
  ASSERT_FALSE(a.tokens.empty()) << server.log();
  EXPECT_EQ(a.done["cached_tokens"], 0);
  const int shareable = (a.done.at("prompt_tokens").get<int>() - 1) / 16 * 16;
  ASSERT_GE(shareable, 64) << a.done.dump();
  EXPECT_GT(server.stats()["kv_share"]["blocks"].get<int>(), 0) << server.stats().dump();

  const test::Stream b = run_served(server, dir);
  EXPECT_EQ(b.done["cached_tokens"], shareable) << b.done.dump();
  const test::Stream alone = run_served(server, dir, {"--set", "kv_share=false"});
  EXPECT_EQ(alone.done["cached_tokens"], 0) << alone.done.dump();
  ASSERT_EQ(b.tokens.size(), 24u);
  EXPECT_EQ(b.tokens, alone.tokens) << "tokens or logprobs differ with the prefix shared";
  EXPECT_EQ(a.tokens, alone.tokens);
}

// The same for workers of tensor_parallel 2 on a sharded vmm server (two GPUs): each rank's pool
// publishes its heads' pieces on its own GPU, B finds every full block of the prompt on both
// ranks (each mapped read-only on its GPU at rank 0's block ids), and its tokens and logprobs
// are those of a TP=2 worker with kv_share off.
// The first TP=2 worker on a `--tensor-parallel 2` server: its prompt's shareable tokens (every
// full block but the one holding its last token), each block published by both ranks.
int first_tp_worker_shares(test::ServerProcess& server, const test::Stream& a) {
  EXPECT_FALSE(a.tokens.empty()) << server.log();
  const int shareable = (a.done.at("prompt_tokens").get<int>() - 1) / 16 * 16;
  EXPECT_GE(shareable, 64) << a.done.dump();
  EXPECT_GE(server.stats()["kv_share"]["blocks"].get<int>(), 2 * shareable / 16)
      << server.stats().dump();
  return shareable;
}

// A TP=2 worker that shares nothing (kv_share=false): it computes the whole prompt.
test::Stream unshared_tp_worker(test::ServerProcess& server, const test::TempDir& dir) {
  const test::Stream alone =
      run_served(server, dir, {"--set", "tensor_parallel=2", "--set", "kv_share=false"});
  EXPECT_EQ(alone.done["cached_tokens"], 0) << alone.done.dump();
  EXPECT_EQ(alone.tokens.size(), 24u);
  return alone;
}

TEST(SharedKvVmmProcess, TensorParallelWorkersShareThePrefixOnEveryRanksGpu) {
  REQUIRE_GPU();
  if (vmm_device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, this machine has " << vmm_device_count();
  test::ServerProcess server({"--backend", "vmm", "--model",
                              test::tiny_model_dir().string() + ":tiny", "--tensor-parallel", "2"});
  test::TempDir dir;
  const test::Stream a = run_served(server, dir, {"--set", "tensor_parallel=2"});
  const int shareable = first_tp_worker_shares(server, a);
  if (::testing::Test::HasFailure()) return;

  const test::Stream b = run_served(server, dir, {"--set", "tensor_parallel=2"});
  EXPECT_EQ(b.done["cached_tokens"], shareable) << b.done.dump();
  const test::Stream alone = unshared_tp_worker(server, dir);
  EXPECT_EQ(b.tokens, alone.tokens) << "tokens or logprobs differ with the prefix shared";
  EXPECT_EQ(a.tokens, alone.tokens);
}

// GPU rank processes (rank 1 in a hearth-tp-follower) share as the in-process ranks do: the
// follower leases a sharing pool and answers the leader's kv_share messages, so a processes
// worker publishes both ranks' pieces, an in-process worker finds them, and a second processes
// worker finds the prefix on both ranks; every one's tokens and logprobs are those of a TP=2
// worker that shares nothing.
TEST(SharedKvVmmProcess, TensorParallelRankProcessesShareThePrefixOnEveryRanksGpu) {
  REQUIRE_GPU();
  if (vmm_device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, this machine has " << vmm_device_count();
  test::ServerProcess server({"--backend", "vmm", "--model",
                              test::tiny_model_dir().string() + ":tiny", "--tensor-parallel", "2"});
  test::TempDir dir;
  const std::vector<std::string> processes{"--set", "tensor_parallel=2", "--set",
                                           "tensor_parallel_processes=true"};
  const test::Stream a = run_served(server, dir, processes);
  // Rank 1's pieces too: published by the follower's pool.
  const int shareable = first_tp_worker_shares(server, a);
  if (::testing::Test::HasFailure()) return;

  const test::Stream in_process = run_served(server, dir, {"--set", "tensor_parallel=2"});
  EXPECT_EQ(in_process.done["cached_tokens"], shareable) << in_process.done.dump();
  const test::Stream b = run_served(server, dir, processes);
  EXPECT_EQ(b.done["cached_tokens"], shareable) << b.done.dump();
  const test::Stream alone = unshared_tp_worker(server, dir);
  EXPECT_EQ(a.tokens, alone.tokens);
  EXPECT_EQ(in_process.tokens, alone.tokens) << "tokens or logprobs differ with the prefix shared";
  EXPECT_EQ(b.tokens, alone.tokens) << "tokens or logprobs differ with the prefix shared";
}

// A served CUDA worker SIGKILLed while it generates (read, so its engine is stepping): its lease
// returns as its connection closes (but for chunks holding blocks it published, which the
// server keeps as its own), and a worker generating beside it keeps the tokens it gets alone.
TEST(SharedKvVmmProcess, AWorkerKilledMidStepReturnsItsLeaseAndOthersKeepTheirTokens) {
  REQUIRE_GPU();
  constexpr int kTokens = 300;
  test::ServerProcess server(
      {"--backend", "vmm", "--model", test::tiny_model_dir().string() + ":tiny"});
  const json baseline = server.stats();
  ASSERT_EQ(baseline["memory"]["kv_bytes"], 0) << baseline.dump();
  auto worker = [&](int seed) {
    return test::start_piped(test::concat(
        {test::binary("hearth-worker"), "--server", server.socket(), "--model", "tiny"},
        test::generation_args(seed, kTokens, true, "cuda")));
  };
  ChildProcess victim = worker(1), survivor = worker(2);
  // Read, the victim keeps stepping: the kill lands while its engine works.
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(test::next_line(victim)) << "the victim stopped early\n" << server.log();
  const auto survivor_first = test::next_line(survivor);
  ASSERT_TRUE(survivor_first) << "the survivor produced no token";
  json s = server.stats();
  uint64_t chunk_bytes = 0;
  for (const json& w : s["workers"])
    if (w["pid"] == victim.pid() && w["kv"]["chunks"].get<uint64_t>() > 0)
      chunk_bytes = w["kv"]["bytes"].get<uint64_t>() / w["kv"]["chunks"].get<uint64_t>();
  ASSERT_GT(chunk_bytes, 0u) << "the victim holds no KV lease: " << s.dump();

  ASSERT_EQ(::kill(victim.pid(), SIGKILL), 0);
  victim.wait();
  const std::string out = *survivor_first + "\n" + test::rest_of_output(survivor);
  EXPECT_TRUE(survivor.wait().success());
  // Both connections are closed now: no worker holds KV, and the only KV left is the chunks
  // the server keeps for their published blocks (kv_share), which other workers may read.
  auto settled = [&](const json& st) {
    return st["workers"].empty() &&
           st["memory"]["kv_bytes"].get<uint64_t>() ==
               st["kv_share"]["orphaned_chunks"].get<uint64_t>() * chunk_bytes;
  };
  const auto deadline = test::patience_deadline();
  s = server.stats();
  while (!settled(s) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s = server.stats();
  }
  EXPECT_TRUE(settled(s)) << s.dump();

  test::TempDir tmp;
  const test::WorkerRun alone =
      test::run_worker(tmp, test::concat({"--model", test::tiny_model_dir().string()},
                                         test::generation_args(2, kTokens, true, "cuda")));
  const test::Stream got = test::parse_stream(out), want = test::parse_stream(alone.out);
  EXPECT_EQ(got.tokens.size(), size_t(kTokens));
  EXPECT_EQ(got.tokens, want.tokens);
}

}  // namespace
}  // namespace hearth
