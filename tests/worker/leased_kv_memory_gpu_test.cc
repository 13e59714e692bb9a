// KV leases on the GPU (issue 22): a weight server with the vmm backend creates each chunk with
// cuMemCreate and passes it as a POSIX fd; the worker's LeasedKvMemory imports the chunks into
// one reserved device range (cuMemAddressReserve + cuMemMap + cuMemSetAccess), and a kernel
// reads and writes across chunk boundaries as if the range were one allocation. Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/batch_ops.h"
#include "tests/support/vmm_kv_server.h"
#include "worker/leased_kv_memory.h"

namespace hearth {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

TEST(LeasedKvMemoryGpu, VmmChunksMapIntoOneRangeThatAKernelReadsAndWrites) {
  std::string why;
  if (!vmm_gpu_available(&why)) GTEST_SKIP() << why;
  test::VmmKvServer server;
  {
    std::shared_ptr<ipc::Client> client = server.client();
    // Blocks of 1 MiB: chunks of 2 MiB hold two; a minimum of 4 blocks leases two chunks.
    LeasedKvMemory memory(client, int64_t(kMiB), 8, 4, test::VmmKvServer::device_range());
    ASSERT_EQ(memory.chunks(), 2);
    ASSERT_EQ(memory.grow(2), 2);
    ASSERT_EQ(memory.blocks(), 6);
    EXPECT_EQ(server.stats()["memory"]["kv_bytes"], 6 * kMiB);

    // Rows of 1024 floats: the first half of the range, random, goes in from the host; a kernel
    // gathers them in a random order into the second half. Both halves cross chunk boundaries.
    constexpr int kHidden = 1024;
    const int rows = int(memory.bytes() / (kHidden * sizeof(float))) / 2;
    std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<float> in(size_t(rows) * kHidden);
    for (float& v : in) v = value(rng);
    std::vector<int32_t> idx(rows);
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng);
    auto* base = reinterpret_cast<float*>(memory.base());
    ASSERT_EQ(cudaMemcpy(base, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    int32_t* d_idx = nullptr;
    ASSERT_EQ(cudaMalloc(&d_idx, idx.size() * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_idx, idx.data(), idx.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
              cudaSuccess);
    kernels::gather_rows(base, d_idx, rows, kHidden, base + size_t(rows) * kHidden, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> out(in.size());
    ASSERT_EQ(cudaMemcpy(out.data(), base + size_t(rows) * kHidden, out.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(d_idx);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < kHidden; c += 97)
        ASSERT_EQ(out[size_t(r) * kHidden + c], in[size_t(idx[r]) * kHidden + c])
            << "row " << r << " column " << c;

    // Shrinking returns the chunks past the first two blocks; the server counts them back.
    EXPECT_EQ(memory.shrink(2), 2);
    EXPECT_EQ(server.stats()["memory"]["kv_bytes"], 2 * kMiB);
  }
}

}  // namespace
}  // namespace hearth
