// hearth-kv-write-bench: paged_kv_write (bias, head norm, RoPE, the paged pool write) at the
// Llama-3-8B attention shape (32 q heads, 8 kv heads, head_dim 128) for a few token counts, one
// block per (token, head) against several heads a block and the automatic shape (issue 23).
// Every shape gives the same bits; this only says which is faster. Prints a markdown table.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"
#include "kernels/device_sm_count.h"
#include "kernels/kv_write_shape_rule.h"
#include "kernels/paged_kv_write_shape.h"
#include "tools/matmul_bench_setup.h"

namespace {

using namespace hearth;
using kernels::Half;

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  HEARTH_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), b.bytes(), cudaMemcpyHostToDevice));
  return b;
}

std::vector<float> random_floats(size_t n, std::mt19937& gen) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hearth-kv-write-bench: paged_kv_write at the 8B attention shape (32/8 heads, head_dim "
      "128, bf16), one block per (token, head) against several heads a block and the automatic "
      "shape; microseconds a launch and per step of 32 layers"};
  std::vector<int> tokens_list{1, 64, 256};
  std::vector<int> shapes{1, 2, 4, 8, 0};
  bool norm = false, bias = false;
  int layers = 32;
  app.add_option("--tokens", tokens_list, "token counts (decode streams)");
  app.add_option("--heads-per-block", shapes, "shapes to time (0: the automatic one)");
  app.add_flag("--norm", norm, "with q/k head norms (Qwen3)");
  app.add_flag("--bias", bias, "with q/k/v biases (Qwen2)");
  app.add_option("--layers", layers, "layers a step, for the per-step column");
  CLI11_PARSE(app, argc, argv);

  try {
    constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlockSize = 16, kBlocks = 2048;
    const int max_t = *std::max_element(tokens_list.begin(), tokens_list.end());
    std::mt19937 gen(7);
    const auto q = upload(random_floats(size_t(max_t) * kHeads * kHeadDim, gen));
    const auto k = upload(random_floats(size_t(max_t) * kKvHeads * kHeadDim, gen));
    const auto v = upload(random_floats(size_t(max_t) * kKvHeads * kHeadDim, gen));
    const auto bq = upload(random_floats(kHeads * kHeadDim, gen));
    const auto bk = upload(random_floats(kKvHeads * kHeadDim, gen));
    const auto bv = upload(random_floats(kKvHeads * kHeadDim, gen));
    const auto qn = upload(random_floats(kHeadDim, gen)), kn = upload(random_floats(kHeadDim, gen));
    std::vector<float> inv(kHeadDim / 2);
    for (int i = 0; i < kHeadDim / 2; ++i)
      inv[i] = std::pow(500000.0f, -2.0f * float(i) / kHeadDim);
    const auto dinv = upload(inv);
    // Distinct slots over shuffled blocks and positions anywhere, as in a decode step.
    std::vector<int> slots(size_t(kBlocks) * kBlockSize), pos(max_t);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), gen);
    slots.resize(max_t);
    for (int& p : pos) p = int(gen() % 4096);
    const auto dslot = upload(slots), dpos = upload(pos);
    const size_t packed = size_t(kKvHeads) * kBlockSize * kHeadDim;
    // Room for the 16-bit pools and for fp8 codes with their scales.
    DeviceBuffer k_pool(kBlocks * packed * 2), v_pool(kBlocks * packed * 2),
        q_out(size_t(max_t) * kHeads * kHeadDim * 2);
    const CudaStream owned_stream = make_stream();
    const cudaStream_t stream = owned_stream.get();

    std::printf(
        "| tokens | KV | heads a block | us a launch | ms a step (%d layers) |\n"
        "|---|---|---|---|---|\n",
        layers);
    for (int t : tokens_list)
      for (bool fp8 : {false, true})
        for (int heads : shapes) {
          kernels::PagedKvWriteArgs a;
          a.q = q.get<float>(), a.k = k.get<float>(), a.v = v.get<float>();
          if (bias) a.bq = bq.get<float>(), a.bk = bk.get<float>(), a.bv = bv.get<float>();
          if (norm) a.q_norm = qn.get<float>(), a.k_norm = kn.get<float>();
          a.inv_freq = dinv.get<float>(), a.pos = dpos.get<int>(), a.slot = dslot.get<int>();
          a.num_tokens = t, a.n_heads = kHeads, a.n_kv_heads = kKvHeads, a.head_dim = kHeadDim;
          a.block_size = kBlockSize, a.fp8_kv = fp8;
          a.q_out = q_out.get(), a.k_pool = k_pool.get(), a.v_pool = v_pool.get();
          const double us = bench::time_us(
              stream, [&](int) { kernels::paged_kv_write_shaped(Half::BF16, a, heads, stream); });
          const std::string shape =
              heads ? std::to_string(heads)
                    : "auto (" +
                          std::to_string(kernels::kv_write_shape::automatic(
                              t, kHeads, kKvHeads, kHeadDim, kernels::device_sm_count())) +
                          ")";
          std::printf("| %d | %s | %s | %.2f | %.3f |\n", t, fp8 ? "fp8" : "bf16", shape.c_str(),
                      us, us * layers / 1e3);
        }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearth-kv-write-bench: %s\n", e.what());
    return 1;
  }
}
