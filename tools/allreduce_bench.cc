// hearth-allreduce-bench: the all-reduce of issue 26 over the GPUs of this process, the fixed-order
// peer-memory kernel (kernels/peer_all_reduce.h; eager and from a CUDA graph) against NCCL
// (kernels/nccl_all_reduce.h, when it loads), at sizes from decode rows to prefill. Prints the
// time and achieved bus bandwidth, 2(N-1)/N x bytes / time (NCCL's own definition), as a markdown
// table and, with --json, as JSON. With --norm-hidden, also the all-reduce that writes the rmsnorm
// of its rows (one launch) against the all-reduce then rmsnorm (two), from CUDA graphs.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/all_reduce.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"
#include "kernels/nccl_all_reduce.h"
#include "kernels/ops.h"
#include "kernels/peer_all_reduce.h"

namespace {

using namespace hearth;

// Rank r's buffers and stream, with events to time its side.
struct Side {
  DeviceBuffer send, recv;
  CudaStream stream;
  CudaEvent start, stop;
};

// Median over 5 batches of the mean time per call in microseconds; a batch is `reps` calls of
// body() on every rank, timed by events on each rank's stream, the slowest rank counting.
double time_us(std::vector<Side>& sides, const std::vector<int>& devices,
               const std::function<void()>& body, int reps) {
  auto batch = [&](int n) {
    for (size_t r = 0; r < sides.size(); ++r) {
      HEARTH_CUDA_CHECK(cudaSetDevice(devices[r]));
      HEARTH_CUDA_CHECK(cudaEventRecord(sides[r].start.get(), sides[r].stream.get()));
    }
    for (int i = 0; i < n; ++i) body();
    double worst = 0;
    for (size_t r = 0; r < sides.size(); ++r) {
      HEARTH_CUDA_CHECK(cudaSetDevice(devices[r]));
      HEARTH_CUDA_CHECK(cudaEventRecord(sides[r].stop.get(), sides[r].stream.get()));
    }
    for (size_t r = 0; r < sides.size(); ++r) {
      HEARTH_CUDA_CHECK(cudaEventSynchronize(sides[r].stop.get()));
      float ms = 0;
      HEARTH_CUDA_CHECK(cudaEventElapsedTime(&ms, sides[r].start.get(), sides[r].stop.get()));
      worst = std::max(worst, 1e3 * ms / n);
    }
    return worst;
  };
  batch(3);
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) t.push_back(batch(reps));
  std::sort(t.begin(), t.end());
  return t[2];
}

// Per call, in microseconds: `calls` calls of launch(rank, stream) captured in one graph on every
// rank's stream, the graphs replayed.
double graph_us(std::vector<Side>& sides, const std::vector<int>& devices, int calls, int reps,
                const std::function<void(int, cudaStream_t)>& launch) {
  std::vector<CudaGraphExec> execs;
  for (size_t r = 0; r < sides.size(); ++r) {
    HEARTH_CUDA_CHECK(cudaSetDevice(devices[r]));
    cudaStream_t s = sides[r].stream.get();
    HEARTH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < calls; ++k) launch(int(r), s);
    cudaGraph_t g = nullptr;
    HEARTH_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CudaGraph graph(g);
    cudaGraphExec_t e = nullptr;
    HEARTH_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    execs.emplace_back(e);
  }
  auto once = [&] {
    for (size_t r = 0; r < sides.size(); ++r) {
      HEARTH_CUDA_CHECK(cudaSetDevice(devices[r]));
      HEARTH_CUDA_CHECK(cudaGraphLaunch(execs[r].get(), sides[r].stream.get()));
    }
  };
  return time_us(sides, devices, once, std::max(1, reps / calls)) / calls;
}

std::string human(size_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MB";
  return std::to_string(bytes >> 10) + " KB";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hearth-allreduce-bench: fp32 all-reduce bus bandwidth over the GPUs of one process, the "
      "fixed-order peer-memory kernel (eager and graph) against NCCL"};
  int gpus = 0;
  size_t min_bytes = 8 << 10, max_bytes = 64 << 20;
  int graph_calls = 20;
  std::string json_path;
  bool no_nccl = false;
  int64_t two_shot_min_bytes = kernels::AllReduceGroup::kDefaultTwoShotMinBytes;
  int norm_hidden = 0;
  app.add_option("--gpus", gpus, "ranks: GPUs 0..N-1 (default every GPU present)");
  app.add_option("--min-bytes", min_bytes, "smallest size, doubled up to --max-bytes");
  app.add_option("--max-bytes", max_bytes, "largest size");
  app.add_option("--graph-calls", graph_calls, "all-reduces per captured graph");
  app.add_option("--json", json_path, "also write the rows as JSON to this file");
  app.add_flag("--no-nccl", no_nccl, "skip NCCL (HEARTH_NCCL_LIBRARY names libnccl.so.2)");
  app.add_option("--two-shot-min-bytes", two_shot_min_bytes,
                 "own kernel: sizes from this up run in two shots over 3+ GPUs (0: all; "
                 "default 1 MB)");
  app.add_option("--norm-hidden", norm_hidden,
                 "also time the all-reduce + bf16 rmsnorm of rows this wide (1, 8, 64, 256 rows "
                 "within --max-bytes): one launch against two (0: skip)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    int present = 0;
    HEARTH_CUDA_CHECK(cudaGetDeviceCount(&present));
    if (gpus == 0) gpus = present;
    if (gpus < 1 || gpus > present) {
      std::fprintf(stderr, "asked for %d GPUs; %d present\n", gpus, present);
      return 1;
    }
    std::vector<int> devices;
    for (int d = 0; d < gpus; ++d) devices.push_back(d);
    const int64_t max_floats = int64_t(max_bytes / 4);
    kernels::PeerAllReduce own(devices, max_floats, two_shot_min_bytes);
    std::unique_ptr<kernels::NcclAllReduce> nccl;
    std::string nccl_note = "skipped (--no-nccl)";
    if (!no_nccl) {
      try {
        nccl = std::make_unique<kernels::NcclAllReduce>(devices);
        int version = 0;
        kernels::nccl::library().get_version(&version);
        nccl_note = "NCCL " + std::to_string(version);
      } catch (const std::exception& e) {
        nccl_note = std::string("unavailable: ") + e.what();
      }
    }
    std::vector<Side> sides;
    for (int d : devices) {
      HEARTH_CUDA_CHECK(cudaSetDevice(d));
      Side s{DeviceBuffer(max_bytes), DeviceBuffer(max_bytes), make_stream(),
             make_event(cudaEventDefault), make_event(cudaEventDefault)};
      HEARTH_CUDA_CHECK(cudaMemset(s.send.get(), 0, max_bytes));
      HEARTH_CUDA_CHECK(cudaMemset(s.recv.get(), 0, max_bytes));
      sides.push_back(std::move(s));
    }
    HEARTH_CUDA_CHECK(cudaSetDevice(0));
    std::printf("%d GPUs; own: fixed-order peer-memory kernel; %s\n\n", gpus, nccl_note.c_str());
    std::printf(
        "| size | own shots | own eager us | own graph us | NCCL us | own eager GB/s | own graph "
        "GB/s | NCCL GB/s |\n|---|---|---|---|---|---|---|---|\n");
    FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
    if (json) std::fprintf(json, "{\"gpus\": %d, \"rows\": [", gpus);
    const double factor = 2.0 * (gpus - 1) / gpus;
    bool first_row = true;
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
      const int64_t count = int64_t(bytes / 4);
      const int reps = int(std::clamp(double(256 << 20) / double(bytes), 5.0, 200.0));
      auto own_once = [&] {
        for (int r = 0; r < gpus; ++r)
          own.run(r, sides[size_t(r)].send.get<float>(), sides[size_t(r)].recv.get<float>(), count,
                  true, sides[size_t(r)].stream.get());
      };
      const double own_us = time_us(sides, devices, own_once, reps);
      // The same calls captured, graph_calls per graph on each rank's stream.
      const double graphed_us =
          graph_us(sides, devices, graph_calls, reps, [&](int r, cudaStream_t s) {
            own.run(r, sides[size_t(r)].send.get<float>(), sides[size_t(r)].recv.get<float>(),
                    count, true, s);
          });
      std::optional<double> nccl_us;
      if (nccl) {
        std::vector<const float*> send;
        std::vector<float*> recv;
        std::vector<cudaStream_t> streams;
        for (Side& s : sides) {
          send.push_back(s.send.get<float>());
          recv.push_back(s.recv.get<float>());
          streams.push_back(s.stream.get());
        }
        nccl_us = time_us(
            sides, devices, [&] { nccl->run(send, recv, count, streams); }, reps);
      }
      auto busbw = [&](double us) { return factor * double(bytes) / (us * 1e3); };  // GB/s
      char nccl_cell[64] = "-", nccl_bw[64] = "-";
      if (nccl_us) {
        std::snprintf(nccl_cell, sizeof nccl_cell, "%.1f", *nccl_us);
        std::snprintf(nccl_bw, sizeof nccl_bw, "%.1f", busbw(*nccl_us));
      }
      const int shots = own.two_shot(count) ? 2 : 1;
      std::printf("| %s | %d | %.1f | %.1f | %s | %.1f | %.1f | %s |\n", human(bytes).c_str(),
                  shots, own_us, graphed_us, nccl_cell, busbw(own_us), busbw(graphed_us), nccl_bw);
      std::fflush(stdout);
      if (json) {
        std::fprintf(json,
                     "%s\n  {\"bytes\": %zu, \"own_shots\": %d, \"own_eager_us\": %.3f, "
                     "\"own_graph_us\": %.3f, "
                     "\"nccl_us\": %s, \"own_eager_busbw_gbps\": %.2f, \"own_graph_busbw_gbps\": "
                     "%.2f, \"nccl_busbw_gbps\": %s}",
                     first_row ? "" : ",", bytes, shots, own_us, graphed_us,
                     nccl_us ? nccl_cell : "null", busbw(own_us), busbw(graphed_us),
                     nccl_us ? nccl_bw : "null");
        first_row = false;
      }
    }
    if (json) {
      std::fprintf(json, "\n]}\n");
      std::fclose(json);
    }
    if (norm_hidden > 0) {
      // Each rank's norm weight and output; the values do not matter to the time.
      std::vector<DeviceBuffer> weight, xn;
      for (int d : devices) {
        HEARTH_CUDA_CHECK(cudaSetDevice(d));
        weight.emplace_back(size_t(norm_hidden) * 4);
        xn.emplace_back(max_bytes / 2);
        HEARTH_CUDA_CHECK(cudaMemset(weight.back().get(), 0, weight.back().bytes()));
      }
      std::printf(
          "\nall-reduce + rmsnorm, rows of %d, graph (us a call)\n\n| rows | two launches | "
          "one launch |\n|---|---|---|\n",
          norm_hidden);
      for (int64_t rows : {1, 8, 64, 256}) {
        const int64_t count = rows * norm_hidden;
        if (count > max_floats) break;
        auto launch = [&](int r, cudaStream_t s) {
          kernels::AllReduceNorm n;
          n.weight = weight[size_t(r)].get<float>();
          n.hidden = norm_hidden;
          n.eps = 1e-5f;
          n.out = xn[size_t(r)].get();
          // Unfused, the group leaves the norm to us (captured, so no rank waits on another).
          if (!own.run(r, sides[size_t(r)].send.get<float>(), sides[size_t(r)].recv.get<float>(),
                       count, true, s, &n))
            kernels::rmsnorm(n.type, sides[size_t(r)].recv.get<float>(), n.weight, int(rows),
                             norm_hidden, n.eps, n.out, s);
        };
        const int reps = 200;
        own.set_fuse_norm(false);
        const double two = graph_us(sides, devices, graph_calls, reps, launch);
        own.set_fuse_norm(true);
        const double one = graph_us(sides, devices, graph_calls, reps, launch);
        std::printf("| %lld | %.1f | %.1f |\n", static_cast<long long>(rows), two, one);
        std::fflush(stdout);
      }
    }
    for (int d : devices) {
      HEARTH_CUDA_CHECK(cudaSetDevice(d));
      HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearth-allreduce-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
