// hearth-bench --batch-kernels: the continuous-batching kernels (kernels/batch_ops.h) timed on
// synthetic data at Llama-3-8B shapes, against the hardware ceilings and cuBLASLt.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hearth::bench {

struct BatchKernelBenchOptions {
  std::vector<int> ms = {1, 8, 32, 64, 128, 256, 1024, 2048};  // matmul rows
  double copy_gbps = 3020, matmul_tflops = 796;                // the ceilings
  double fp8_tflops = 1979;  // the H100's dense fp8 tensor-core rate (the fp8 rows' ceiling)
  bool all_tiles = false;    // also time every forced tile family of the matmul
  // When set: only the attention steps whose name contains it (for a profiler: one step alone).
  std::string attention_step;
  bool sampling_only = false;  // only the sampling table
};

// Prints a table to stdout and returns the measurements as JSON.
nlohmann::json batch_kernel_bench(const BatchKernelBenchOptions& options);

}  // namespace hearth::bench
