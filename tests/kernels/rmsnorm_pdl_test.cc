// rmsnorm and rmsnorm_fp8 under programmatic dependent launch (issue 23): launched right behind
// the matmul that writes their input (a kernel that lets its dependents start early) and followed
// by a matmul that reads their output, on one stream with nothing between, they give the same
// bytes as when each kernel starts only after the one before has finished: each waits for its
// input before reading it, and the matmul after waits for the norm's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/cuda_handles.h"
#include "kernels/fp8_quantize.h"
#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"

namespace hearth {
namespace {

using kernels::Half;
using kernels::MatmulEpilogue;
using namespace hearth::test;

constexpr int kHidden = 4096, kOut = 1024;

struct Chain {
  DeviceBuffer a, w1, w2, norm, x, xn, y, codes, scales, workspace;
};

Chain make_chain(Half t, int m) {
  Chain c;
  c.a = upload_half(random_floats(size_t(m) * kHidden), t);
  c.w1 = upload_half(random_floats(size_t(kHidden) * kHidden, 0.02f), t);
  c.w2 = upload_half(random_floats(size_t(kOut) * kHidden, 0.02f), t);
  c.norm = upload(random_floats(kHidden));
  c.x = DeviceBuffer(size_t(m) * kHidden * 4), c.xn = DeviceBuffer(size_t(m) * kHidden * 2);
  c.y = DeviceBuffer(size_t(m) * kOut * 4), c.codes = DeviceBuffer(size_t(m) * kHidden);
  c.scales = DeviceBuffer(size_t(m) * 4);
  const size_t ws = std::max(kernels::batch_matmul_workspace_bytes(m, kHidden, kHidden),
                             kernels::batch_matmul_workspace_bytes(m, kOut, kHidden));
  c.workspace = DeviceBuffer(ws);
  if (ws) HEARTH_CUDA_CHECK(cudaMemset(c.workspace.get(), 0, ws));
  return c;
}

void matmul(Half t, const void* a, const DeviceBuffer& w, int m, int n, DeviceBuffer& out,
            DeviceBuffer& workspace, cudaStream_t s) {
  kernels::MatmulArgs args;
  args.a = a, args.w = w.get(), args.m = m, args.n = n, args.k = kHidden, args.out = out.get();
  args.workspace = workspace.get(), args.workspace_bytes = workspace.bytes();
  kernels::batch_matmul(t, MatmulEpilogue::StoreF32, args, s);
}

struct Bytes {
  std::vector<uint8_t> xn, y, codes, scales;
};

// matmul -> rmsnorm -> matmul, and matmul -> rmsnorm_fp8; `apart`: a synchronize after each.
Bytes run_chain(Half t, int m, Chain& c, bool apart, cudaStream_t s) {
  for (DeviceBuffer* b : {&c.x, &c.xn, &c.y, &c.codes, &c.scales})
    HEARTH_CUDA_CHECK(cudaMemset(b->get(), 0xFF, b->bytes()));
  HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
  auto gap = [&] {
    if (apart) HEARTH_CUDA_CHECK(cudaStreamSynchronize(s));
  };
  matmul(t, c.a.get(), c.w1, m, kHidden, c.x, c.workspace, s);
  gap();
  kernels::rmsnorm(t, c.x.get<float>(), c.norm.get<float>(), m, kHidden, 1e-5f, c.xn.get(), s);
  gap();
  matmul(t, c.xn.get(), c.w2, m, kOut, c.y, c.workspace, s);
  gap();
  matmul(t, c.a.get(), c.w1, m, kHidden, c.x, c.workspace, s);
  gap();
  kernels::rmsnorm_fp8(t, c.x.get<float>(), c.norm.get<float>(), m, kHidden, 1e-5f,
                       c.codes.get<uint8_t>(), c.scales.get<float>(), s);
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(s));
  return {download<uint8_t>(c.xn, c.xn.bytes()), download<uint8_t>(c.y, c.y.bytes()),
          download<uint8_t>(c.codes, c.codes.bytes()),
          download<uint8_t>(c.scales, c.scales.bytes())};
}

bool same(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

TEST(RmsnormPdl, ChainedLaunchesGiveTheBytesOfSeparateOnes) {
  HEARTH_REQUIRE_GPU();
  const CudaStream stream = make_stream();
  for (Half t : {Half::BF16, Half::F16})
    for (int m : {1, 7, 64, 256}) {
      Chain c = make_chain(t, m);
      const Bytes apart = run_chain(t, m, c, true, stream.get());
      // The norm's output was written (not the 0xFF poison).
      ASSERT_NE(apart.xn[0] & apart.xn[1], 0xFF) << name(t) << " m " << m;
      for (int rep = 0; rep < 3; ++rep) {
        const Bytes chained = run_chain(t, m, c, false, stream.get());
        EXPECT_TRUE(same(chained.xn, apart.xn)) << "rmsnorm out, " << name(t) << " m " << m;
        EXPECT_TRUE(same(chained.y, apart.y)) << "matmul after, " << name(t) << " m " << m;
        EXPECT_TRUE(same(chained.codes, apart.codes)) << "fp8 codes, " << name(t) << " m " << m;
        EXPECT_TRUE(same(chained.scales, apart.scales)) << "fp8 scales, " << name(t) << " m " << m;
      }
    }
}

}  // namespace
}  // namespace hearth
