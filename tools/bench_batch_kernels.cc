#include "tools/bench_batch_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "kernels/batch_ops.h"
#include "kernels/device_buffer.h"
#include "kernels/fp8_matmul.h"
#include "kernels/fp8_quantize.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/wgmma_matmul.h"
#include "worker/engine/logprobs.h"

namespace hearth::bench {

namespace {

using json = nlohmann::json;
using kernels::Half;

// Random bf16 values (about N(0, 0.02), never all zeros: zeros run faster than real data).
void fill_random(void* dst, size_t bytes) {
  static const std::vector<uint16_t> pattern = [] {
    std::mt19937 gen(7);
    std::normal_distribution<float> d(0.0f, 0.02f);
    std::vector<uint16_t> v(8 << 20);
    for (auto& x : v) {
      const float f = d(gen);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      x = uint16_t(bits >> 16);
    }
    return v;
  }();
  const size_t chunk = pattern.size() * 2;
  for (size_t off = 0; off < bytes; off += chunk)
    HEARTH_CUDA_CHECK(cudaMemcpy(static_cast<char*>(dst) + off, pattern.data(),
                                 std::min(chunk, bytes - off), cudaMemcpyHostToDevice));
}

class Timer {
 public:
  explicit Timer(cudaStream_t s) : stream_(s) {
    HEARTH_CUDA_CHECK(cudaEventCreate(&e0_));
    HEARTH_CUDA_CHECK(cudaEventCreate(&e1_));
  }
  ~Timer() {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }
  // The host's time to enqueue body(i), in microseconds (the launch, and whatever the host
  // prepares for it), over `calls` calls behind one another on a busy stream; then waits.
  double host_us(const std::function<void(int)>& body, int calls = 100) {
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) body(i);
    const auto t1 = std::chrono::steady_clock::now();
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return std::chrono::duration<double, std::micro>(t1 - t0).count() / calls;
  }
  // Median over 3 batches of the mean time of body(i), in microseconds; batches last ~20 ms.
  double us(const std::function<void(int)>& body) {
    body(0);
    body(1);
    const double once = batch(body, 1, 2);
    const int reps = int(std::clamp(20000.0 / std::max(once, 1.0), 3.0, 500.0));
    double t[3];
    for (double& v : t) v = batch(body, reps, 0);
    std::sort(t, t + 3);
    return t[1];
  }

 private:
  double batch(const std::function<void(int)>& body, int reps, int first) {
    HEARTH_CUDA_CHECK(cudaEventRecord(e0_, stream_));
    for (int i = 0; i < reps; ++i) body(first + i);
    HEARTH_CUDA_CHECK(cudaEventRecord(e1_, stream_));
    HEARTH_CUDA_CHECK(cudaEventSynchronize(e1_));
    float ms = 0;
    HEARTH_CUDA_CHECK(cudaEventElapsedTime(&ms, e0_, e1_));
    return 1e3 * ms / reps;
  }
  cudaStream_t stream_;
  cudaEvent_t e0_, e1_;
};

const char* tiles_name(kernels::MatmulTiles t) {
  switch (t) {
    case kernels::MatmulTiles::Auto:
      return "invariant";
    case kernels::MatmulTiles::Skinny:
      return "inv/skinny";
    case kernels::MatmulTiles::Medium:
      return "inv/medium";
    default:
      return "inv/large";
  }
}

json bench_matmul(const BatchKernelBenchOptions& o, cudaStream_t stream, Timer& timer) {
  struct Shape {
    const char* name;
    int n, k;
    bool swiglu;  // gate and up fused; cuBLASLt runs them as one [2n, k] weight
  };
  const Shape shapes[] = {{"q/o_proj", 4096, 4096, false}, {"k/v_proj", 1024, 4096, false},
                          {"gate/up", 14336, 4096, false}, {"gate+up SwiGLU", 14336, 4096, true},
                          {"down", 4096, 14336, false},    {"lm_head", 128256, 4096, false}};
  const int max_m = *std::max_element(o.ms.begin(), o.ms.end());
  // Weights rotate through an arena so that repeated launches do not read them from L2.
  const size_t arena_bytes = size_t(1200) << 20;
  DeviceBuffer arena(arena_bytes), a(size_t(max_m) * 14336 * 2), out(size_t(max_m) * 128256 * 2);
  fill_random(arena.get(), arena_bytes);
  fill_random(a.get(), a.bytes());
  kernels::Gemm cublas(Half::BF16);
  // fp8 (issue 25): e4m3 weights with per-channel scales, activations quantized per token. The
  // weight codes are valid finite e4m3 (no NaN), as quantized weights are.
  const bool fp8 = kernels::fp8_matmul_available();
  const size_t fp8_arena_bytes = arena_bytes / 2;
  DeviceBuffer fp8_arena(fp8 ? fp8_arena_bytes : 0), fp8_scales(fp8 ? 2 * 14336 * 4 : 0),
      fp8_a(fp8 ? size_t(max_m) * 14336 : 0), fp8_a_scales(fp8 ? size_t(max_m) * 4 : 0);
  if (fp8) {
    std::vector<uint8_t> codes(64 << 20);
    std::mt19937 gen(5);
    for (auto& c : codes) c = uint8_t(gen() % 0x7f) | uint8_t(gen() & 0x80);  // never 0x7f
    for (size_t off = 0; off < fp8_arena_bytes; off += codes.size())
      HEARTH_CUDA_CHECK(cudaMemcpy(static_cast<char*>(fp8_arena.get()) + off, codes.data(),
                                   std::min(codes.size(), fp8_arena_bytes - off),
                                   cudaMemcpyHostToDevice));
    const std::vector<float> scales(2 * 14336, 0.02f / 448);
    HEARTH_CUDA_CHECK(
        cudaMemcpy(fp8_scales.get(), scales.data(), fp8_scales.bytes(), cudaMemcpyHostToDevice));
    kernels::Fp8QuantizeArgs q;  // the activations' codes and scales, as a real step has them
    q.in = a.get(), q.rows = max_m, q.k = 14336, q.codes = fp8_a.get<uint8_t>();
    q.scales = fp8_a_scales.get<float>();
    kernels::fp8_quantize_rows(Half::BF16, q, stream);
  }
  json rows = json::array();
  std::printf(
      "\n| matmul | N x K | M | kernel | us | GB/s | of %.0f GB/s | TFLOP/s | of %.0f TFLOP/s "
      "(fp8: "
      "of %.0f) | vs cuBLASLt |\n|---|---|---|---|---|---|---|---|---|---|\n",
      o.copy_gbps, o.matmul_tflops, o.fp8_tflops);
  for (const Shape& s : shapes) {
    const int mats = s.swiglu ? 2 : 1;
    const size_t w_bytes = size_t(s.n) * s.k * 2 * mats;
    const int copies = int(std::clamp<size_t>(arena_bytes / w_bytes, 1, 16));
    auto weight = [&](int i) { return static_cast<char*>(arena.get()) + (i % copies) * w_bytes; };
    for (int m : o.ms) {
      const double flops = 2.0 * m * s.n * s.k * mats;
      const double bytes = double(w_bytes) + 2.0 * m * s.k + 2.0 * m * s.n * mats;
      std::vector<kernels::MatmulTiles> families{kernels::MatmulTiles::Auto};
      if (o.all_tiles)
        families.insert(families.end(), {kernels::MatmulTiles::Skinny, kernels::MatmulTiles::Medium,
                                         kernels::MatmulTiles::Large});
      // The invariant kernels first: cuBLASLt right before would leave the GPU hotter.
      std::vector<double> family_us;
      for (kernels::MatmulTiles tiles : families) {
        const size_t ws_bytes = kernels::batch_matmul_workspace_bytes(m, s.n, s.k, tiles, s.swiglu);
        DeviceBuffer ws(ws_bytes);
        if (ws_bytes) HEARTH_CUDA_CHECK(cudaMemset(ws.get(), 0, ws_bytes));
        family_us.push_back(timer.us([&](int i) {
          kernels::MatmulArgs args;
          args.a = a.get(), args.w = weight(i), args.m = m, args.n = s.n, args.k = s.k;
          args.a_rows_readable = int(a.bytes() / (size_t(s.k) * 2));
          if (s.swiglu) args.w_up = weight(i) + w_bytes / 2;
          args.out = out.get(), args.workspace = ws.get(), args.workspace_bytes = ws_bytes;
          args.tiles = tiles;
          kernels::batch_matmul(
              Half::BF16,
              s.swiglu ? kernels::MatmulEpilogue::SwiGLU : kernels::MatmulEpilogue::StoreHalf, args,
              stream);
        }));
      }
      // fp8 (not the LM head, which stays 16-bit): the matmul alone on quantized activations,
      // and with the activations' quantization before it (what a step runs).
      const bool fp8_shape = fp8 && s.n != 128256;
      const size_t fp8_w_bytes = size_t(s.n) * s.k * mats;
      const int fp8_copies = int(std::clamp<size_t>(fp8_arena_bytes / fp8_w_bytes, 1, 16));
      const double fp8_bytes = double(fp8_w_bytes) + double(m) * s.k + 2.0 * m * s.n * mats;
      auto fp8_matmul = [&](int i) {
        const uint8_t* w = fp8_arena.get<uint8_t>() + (i % fp8_copies) * fp8_w_bytes;
        kernels::Fp8MatmulArgs args;
        args.a = fp8_a.get<uint8_t>(), args.a_scale = fp8_a_scales.get<float>();
        args.w = w, args.w_scale = fp8_scales.get<float>(), args.m = m, args.n = s.n, args.k = s.k;
        args.a_rows_readable = int(fp8_a.bytes() / size_t(s.k));
        if (s.swiglu)
          args.w_up = w + fp8_w_bytes / 2, args.w_up_scale = fp8_scales.get<float>() + s.n;
        args.out = out.get();
        kernels::fp8_matmul(
            Half::BF16,
            s.swiglu ? kernels::MatmulEpilogue::SwiGLU : kernels::MatmulEpilogue::StoreHalf, args,
            kernels::Fp8Tiles::Auto, stream);
      };
      double fp8_us = 0, fp8_quant_us = 0;
      if (fp8_shape) {
        fp8_us = timer.us(fp8_matmul);
        fp8_quant_us = timer.us([&](int i) {
          kernels::Fp8QuantizeArgs q;
          q.in = a.get(), q.rows = m, q.k = s.k, q.codes = fp8_a.get<uint8_t>();
          q.scales = fp8_a_scales.get<float>();
          kernels::fp8_quantize_rows(Half::BF16, q, stream);
          fp8_matmul(i);
        });
      }
      const double cublas_us = timer.us([&](int i) {
        cublas.run(weight(i), a.get(), out.get(), m, s.n * mats, s.k, kernels::Gemm::Out::Half,
                   stream);
      });
      auto report = [&](const char* kernel, double us, double baseline, double moved = 0,
                        double peak = 0) {
        if (moved == 0) moved = bytes;
        if (peak == 0) peak = o.matmul_tflops;
        const double gbps = moved / us / 1e3, tflops = flops / us / 1e6;
        rows.push_back({{"shape", s.name},
                        {"n", s.n},
                        {"k", s.k},
                        {"m", m},
                        {"kernel", kernel},
                        {"us", us},
                        {"gbps", gbps},
                        {"tflops", tflops},
                        {"fraction_of_copy_bandwidth", gbps / o.copy_gbps},
                        {"fraction_of_matmul_rate", tflops / peak},
                        {"matmul_rate_ceiling_tflops", peak},
                        {"time_vs_cublaslt", us / baseline}});
        std::printf("| %s | %dx%d | %d | %s | %.1f | %.0f | %.1f%% | %.1f | %.1f%% | %.2fx |\n",
                    s.name, s.n, s.k, m, kernel, us, gbps, 100 * gbps / o.copy_gbps, tflops,
                    100 * tflops / peak, us / baseline);
      };
      report("cuBLASLt", cublas_us, cublas_us);
      for (size_t f = 0; f < families.size(); ++f)
        report(tiles_name(families[f]), family_us[f], cublas_us);
      if (fp8_shape) {
        report("fp8 wgmma", fp8_us, cublas_us, fp8_bytes, o.fp8_tflops);
        report("fp8 quantize + wgmma", fp8_quant_us, cublas_us, fp8_bytes + 2.0 * m * s.k,
               o.fp8_tflops);
      }
      std::fflush(stdout);
    }
  }
  return rows;
}

json bench_attention(const BatchKernelBenchOptions& o, cudaStream_t stream, Timer& timer) {
  // Llama-3-8B attention: 32 query heads, 8 kv heads, head_dim 128; 16-token blocks.
  const int n_heads = 32, n_kv = 8, d = 128, bs = 16, blocks = 9000;
  const size_t block_bytes = size_t(n_kv) * bs * d * 2;
  DeviceBuffer kp(blocks * block_bytes), vp(blocks * block_bytes);
  fill_random(kp.get(), kp.bytes());
  fill_random(vp.get(), vp.bytes());
  const int max_tokens = 4096;
  DeviceBuffer q(size_t(max_tokens) * n_heads * d * 2), out(q.bytes());
  fill_random(q.get(), q.bytes());
  json rows = json::array();
  std::printf(
      "\n| attention | step | kernel | us | KV GB/s | of %.0f GB/s | TFLOP/s | host us a launch "
      "|\n|---|---|---|---|---|---|---|---|\n",
      o.copy_gbps);
  struct Step {
    std::string name;
    std::vector<std::pair<int, int>> seqs;  // (first_pos, queries)
  };
  std::vector<Step> steps;
  steps.push_back({"decode 64 x 1k", std::vector<std::pair<int, int>>(64, {1023, 1})});
  steps.push_back({"decode 256 x 512", std::vector<std::pair<int, int>>(256, {511, 1})});
  steps.push_back({"decode 1 x 8k", {{8191, 1}}});
  steps.push_back({"decode 8 x 8k", std::vector<std::pair<int, int>>(8, {8191, 1})});
  steps.push_back({"prefill chunk 512 at 0", {{0, 512}}});
  steps.push_back({"prefill chunk 512 at 4k", {{4096, 512}}});
  steps.push_back({"prefill chunk 2k at 0", {{0, 2048}}});
  steps.push_back({"prefill chunk 2k at 4k", {{4096, 2048}}});
  {
    Step mixed{"chunk 2k + 63 decodes x 1k", std::vector<std::pair<int, int>>(63, {1023, 1})};
    mixed.seqs.push_back({0, 2048});
    steps.push_back(mixed);
  }
  std::mt19937 gen(11);
  for (const Step& st : steps) {
    if (st.name.find(o.attention_step) == std::string::npos) continue;
    const int seqs = int(st.seqs.size());
    std::vector<int> starts{0}, first, table;
    int max_blocks = 1, max_kv = 1;
    double kv_bytes = 0, flops = 0;
    for (auto [f, n] : st.seqs) max_blocks = std::max(max_blocks, (f + n + bs - 1) / bs);
    for (auto [f, n] : st.seqs) {
      starts.push_back(starts.back() + n);
      first.push_back(f);
      max_kv = std::max(max_kv, f + n);
      for (int b = 0; b < max_blocks; ++b) table.push_back(int(gen() % blocks));
      kv_bytes += double(f + n) * n_kv * d * 2 * 2;
      flops += 4.0 * n_heads * d * (double(f) * n + double(n) * (n + 1) / 2);
    }
    const int tokens = starts.back();
    DeviceBuffer dstart(starts.size() * 4), dfirst(first.size() * 4), dtable(table.size() * 4);
    HEARTH_CUDA_CHECK(
        cudaMemcpy(dstart.get(), starts.data(), dstart.bytes(), cudaMemcpyHostToDevice));
    HEARTH_CUDA_CHECK(
        cudaMemcpy(dfirst.get(), first.data(), dfirst.bytes(), cudaMemcpyHostToDevice));
    HEARTH_CUDA_CHECK(
        cudaMemcpy(dtable.get(), table.data(), dtable.bytes(), cudaMemcpyHostToDevice));
    const size_t scratch_bytes =
        kernels::paged_attention_scratch_bytes(tokens, seqs, max_kv, n_heads, d, seqs);
    DeviceBuffer scratch(scratch_bytes);
    kernels::PagedAttentionArgs a;
    a.q = q.get(), a.k_pool = kp.get(), a.v_pool = vp.get();
    a.query_start = dstart.get<int>(), a.first_pos = dfirst.get<int>();
    a.block_table = dtable.get<int>();
    a.num_seqs = seqs, a.num_tokens = tokens, a.max_blocks = max_blocks, a.block_size = bs;
    a.n_heads = n_heads, a.n_kv_heads = n_kv, a.head_dim = d, a.max_kv_len = max_kv;
    a.scale = 1.0f / std::sqrt(float(d)), a.scratch = scratch.get();
    a.scratch_bytes = scratch_bytes, a.out = out.get();
    // Each kernel with its own plan (the item size differs); the default (auto) is one of them.
    // The wgmma kernel reads whole tiles by TMA when it knows the pool's extent (as the engine
    // does), and all by cp.async without it.
    struct Kind {
      const char* name;
      kernels::PagedAttentionKernel kernel;
      int64_t pool_blocks;
    };
    std::vector<Kind> kinds{
        {"mma.sync", kernels::PagedAttentionKernel::MmaSync, blocks},
        {"mma.sync general", kernels::PagedAttentionKernel::MmaSyncGeneral, blocks}};
    if (kernels::wgmma_matmul_available()) {
      kinds.push_back({"wgmma", kernels::PagedAttentionKernel::Wgmma, blocks});
      kinds.push_back({"wgmma cp.async", kernels::PagedAttentionKernel::Wgmma, 0});
    }
    for (auto [kind, kernel, pool_blocks] : kinds) {
      a.kernel = kernel;
      a.pool_blocks = pool_blocks;
      const double plan_us = timer.us([&](int) { kernels::paged_attention_plan(a, stream); });
      const auto launch = [&](int) { kernels::paged_attention(Half::BF16, a, stream); };
      const double us = timer.us(launch);
      // Eager steps pay this on the host each layer (the wgmma kernel's TMA rows include the
      // encoding of their two tensor maps); a replayed graph does not.
      const double host_us = timer.host_us(launch);
      const double gbps = kv_bytes / us / 1e3, tflops = flops / us / 1e6;
      rows.push_back({{"step", st.name},
                      {"kernel", kind},
                      {"us", us},
                      {"plan_us", plan_us},
                      {"host_us_per_launch", host_us},
                      {"kv_gbps", gbps},
                      {"fraction_of_copy_bandwidth", gbps / o.copy_gbps},
                      {"tflops", tflops}});
      std::printf(
          "| paged | %s | %s | %.1f (+%.1f plan, once per step) | %.0f | %.1f%% | %.1f | %.1f |\n",
          st.name.c_str(), kind, us, plan_us, gbps, 100 * gbps / o.copy_gbps, tflops, host_us);
    }
  }

  // The one-sequence kernels of today's engine on a contiguous cache, for comparison.
  const int context = 8192;
  DeviceBuffer pos(4);
  const int p = context - 1;
  HEARTH_CUDA_CHECK(cudaMemcpy(pos.get(), &p, 4, cudaMemcpyHostToDevice));
  DeviceBuffer partial(kernels::decode_attention_scratch_floats(n_heads, d, context) * 4),
      counters(n_kv * 4);
  HEARTH_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  kernels::DecodeAttentionArgs da;
  da.q = q.get(), da.k_cache = kp.get(), da.v_cache = vp.get(), da.pos = pos.get<int>();
  da.n_heads = n_heads, da.n_kv_heads = n_kv, da.head_dim = d, da.context = context;
  da.scale = 1.0f / std::sqrt(float(d)), da.partial = partial.get<float>();
  da.counters = counters.get<unsigned>(), da.out = out.get();
  const double dec_us = timer.us([&](int) { kernels::attention_decode(Half::BF16, da, stream); });
  const double dec_gbps = double(context) * n_kv * d * 4 / dec_us / 1e3;
  rows.push_back({{"step", "contiguous decode 1 x 8k (attention_decode)"},
                  {"us", dec_us},
                  {"kv_gbps", dec_gbps}});
  std::printf("| contiguous | decode 1 x 8k (attention_decode) | | %.1f | %.0f | %.1f%% | |\n",
              dec_us, dec_gbps, 100 * dec_gbps / o.copy_gbps);
  kernels::PrefillAttentionArgs pa;
  pa.q = q.get(), pa.k_cache = kp.get(), pa.v_cache = vp.get(), pa.start_pos = 0, pa.n = 2048;
  pa.n_heads = n_heads, pa.n_kv_heads = n_kv, pa.head_dim = d, pa.context = context;
  pa.scale = 1.0f / std::sqrt(float(d)), pa.out = out.get();
  const double pre_us = timer.us([&](int) { kernels::attention_prefill(Half::BF16, pa, stream); });
  const double pre_tflops = 4.0 * n_heads * d * (2048.0 * 2049 / 2) / pre_us / 1e6;
  rows.push_back({{"step", "contiguous prefill 2k at 0 (attention_prefill)"},
                  {"us", pre_us},
                  {"tflops", pre_tflops}});
  std::printf("| contiguous | prefill 2k at 0 (attention_prefill) | | %.1f | | | %.1f |\n", pre_us,
              pre_tflops);
  return rows;
}

json bench_sampling(cudaStream_t stream, Timer& timer) {
  const int vocab = 128256;
  json out = json::array();
  for (const int rows : {64, 256}) {
    DeviceBuffer logits(size_t(rows) * vocab * 4), tokens(rows * 4), logprobs(rows * 4);
    DeviceBuffer top_tokens(size_t(rows) * kernels::kMaxSampleTopLogprobs * 4),
        top_logprobs(size_t(rows) * kernels::kMaxSampleTopLogprobs * 4);
    {
      std::mt19937 gen(3);
      std::normal_distribution<float> d(0.0f, 3.0f);
      std::vector<float> v(size_t(rows) * vocab);
      for (auto& x : v) x = d(gen);
      HEARTH_CUDA_CHECK(cudaMemcpy(logits.get(), v.data(), logits.bytes(), cudaMemcpyHostToDevice));
    }
    DeviceBuffer params(rows * sizeof(kernels::SampleRowParams));
    struct Mode {
      const char* name;
      float temperature, top_p;
      int top_k, top_logprobs;
      float min_p;
    };
    const Mode modes[] = {{"greedy", 0.0f, 1.0f, 0, 0, 0.0f},
                          {"top-k 40", 0.8f, 1.0f, 40, 0, 0.0f},
                          {"top-p 0.9", 0.8f, 0.9f, 0, 0, 0.0f},
                          {"top-k 40, top-p 0.9", 0.8f, 0.9f, 40, 0, 0.0f},
                          {"min-p 0.05", 1.0f, 1.0f, 0, 0, 0.05f},
                          {"temperature 1", 1.0f, 1.0f, 0, 0, 0.0f},
                          {"temperature 1, top_logprobs 5", 1.0f, 1.0f, 0, 5, 0.0f}};
    std::printf("\n| sampling | %d rows x %d | us |\n|---|---|---|\n", rows, vocab);
    for (const Mode& m : modes) {
      std::vector<kernels::SampleRowParams> p(rows);
      for (int r = 0; r < rows; ++r)
        p[r].temperature = m.temperature, p[r].top_p = m.top_p, p[r].top_k = m.top_k, p[r].seed = r,
        p[r].step = 5, p[r].top_logprobs = m.top_logprobs, p[r].min_p = m.min_p;
      HEARTH_CUDA_CHECK(cudaMemcpy(params.get(), p.data(), params.bytes(), cudaMemcpyHostToDevice));
      kernels::BatchSampleArgs a;
      a.logits = logits.get<float>(), a.rows = rows, a.vocab = vocab;
      a.params = params.get<kernels::SampleRowParams>(), a.tokens = tokens.get<int32_t>();
      a.logprobs = logprobs.get<float>();
      if (m.top_logprobs > 0)
        a.top_tokens = top_tokens.get<int32_t>(), a.top_logprobs = top_logprobs.get<float>();
      const double us = timer.us([&](int) { kernels::batch_sample(a, stream); });
      out.push_back({{"mode", m.name}, {"rows", rows}, {"vocab", vocab}, {"us", us}});
      std::printf("| %s | | %.1f |\n", m.name, us);
    }
    {
      // The path top_logprobs took before they were selected on the device: every row copied
      // back whole and ranked on the host (worker/engine/logprobs.h).
      std::vector<float> host(size_t(rows) * vocab);
      const int reps = 3;
      const auto t0 = std::chrono::steady_clock::now();
      for (int rep = 0; rep < reps; ++rep) {
        HEARTH_CUDA_CHECK(cudaMemcpyAsync(host.data(), logits.get(), logits.bytes(),
                                          cudaMemcpyDeviceToHost, stream));
        HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream));
        for (int r = 0; r < rows; ++r)
          (void)hearth::top_logprobs(std::span<const float>(&host[size_t(r) * vocab], vocab), 5);
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          reps;
      const char* name = "top_logprobs 5 on the host (rows copied back, the old path)";
      out.push_back({{"mode", name}, {"rows", rows}, {"vocab", vocab}, {"us", us}});
      std::printf("| %s | | %.1f |\n", name, us);
    }
  }
  return out;
}

}  // namespace

json batch_kernel_bench(const BatchKernelBenchOptions& o) {
  cudaStream_t stream;
  HEARTH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Timer timer(stream);
  json report;
  const bool everything = o.attention_step.empty() && !o.sampling_only;
  if (everything) report["matmul"] = bench_matmul(o, stream, timer);
  if (!o.sampling_only) report["attention"] = bench_attention(o, stream, timer);
  if (everything || o.sampling_only) report["sampling"] = bench_sampling(stream, timer);
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaStreamDestroy(stream);
  return report;
}

}  // namespace hearth::bench
