// KV leases on the GPU (issue 22): hearth-server's handler with the vmm backend creates every
// chunk with cuMemCreate and passes it as a POSIX fd; the client imports the chunks into one
// reserved device range (cuMemAddressReserve + cuMemMap + cuMemSetAccess), and a kernel reads
// and writes across the chunks' boundaries as if the range were one allocation, checked against
// the same arithmetic on the host over fresh random inputs. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "tests/support/vmm_kv_server.h"
#include "weight-server/sharing/kv_chunk.h"
#include "weight-server/sharing/vmm_backend.h"

cudaError_t kv_lease_test_permute_scale(const float* in, const int32_t* idx, int64_t n, float* out);

namespace hearth {
namespace {

using json = nlohmann::json;
constexpr uint64_t kChunk = uint64_t(2) << 20;

TEST(KvLeaseGpu, VmmChunksMapIntoOneRangeThatAKernelReadsAndWrites) {
  std::string why;
  if (!vmm_gpu_available(&why)) GTEST_SKIP() << why;
  test::VmmKvServer server;
  {
    const std::shared_ptr<ipc::Client> connection = server.client();
    ipc::Client& client = *connection;
    ipc::Frame lease = client.call(ipc::op::kKvLease, ipc::make_kv_lease_args({kChunk, 4, 4}));
    ASSERT_EQ(lease.fds.size(), 4u);
    const json stats = client.call(ipc::op::kStats).body;
    EXPECT_EQ(stats["memory"]["kv_bytes"], 4 * kChunk);
    EXPECT_GT(stats["memory"]["device_bytes"].get<uint64_t>(), 4 * kChunk);

    // Room for six chunks; the four leased ones go at 0-3, one after another.
    std::unique_ptr<KvChunkRange> range = reserve_vmm_kv_range(0, 6 * kChunk);
    for (size_t i = 0; i < lease.fds.size(); ++i)
      range->map(i * kChunk, lease.fds[i].get(), kChunk, "chunk " + std::to_string(i));
    // A chunk of another size is refused by the driver, not mapped.
    EXPECT_THROW(range->map(4 * kChunk, lease.fds[0].get(), 2 * kChunk, "oversized"),
                 std::runtime_error);

    // The first two chunks' floats, random, go in from the host; the kernel writes a permuted,
    // scaled copy into the last two.
    const int64_t n = int64_t(2 * kChunk / sizeof(float));
    std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<float> in(n);
    for (float& v : in) v = value(rng);
    std::vector<int32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng);
    auto* base = reinterpret_cast<float*>(range->base());
    ASSERT_EQ(cudaMemcpy(base, in.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    int32_t* d_idx = nullptr;
    ASSERT_EQ(cudaMalloc(&d_idx, n * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_idx, idx.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(kv_lease_test_permute_scale(base, d_idx, n, base + n), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> out(n);
    ASSERT_EQ(cudaMemcpy(out.data(), base + n, n * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(d_idx);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], in[idx[i]] * 2.0f + 1.0f) << "float " << i;

    // Returned, the chunks leave the server's accounting; unmapped, the range stays reserved.
    for (size_t i = 0; i < lease.fds.size(); ++i) range->unmap(i * kChunk, kChunk);
    const std::vector<uint64_t> ids = lease.body["chunks"].get<std::vector<uint64_t>>();
    client.call(ipc::op::kKvReturn, ipc::make_kv_return_args(ids));
    EXPECT_EQ(client.call(ipc::op::kStats).body["memory"]["kv_bytes"], 0);
  }
}

}  // namespace
}  // namespace hearth
