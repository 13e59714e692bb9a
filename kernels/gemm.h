// Prefill matmuls through cuBLASLt (opened on first use, see cublaslt_library.h):
// out[M, N] = x[M, K] . W[N, K]^T (+ out when accumulating), with 16-bit operands and fp32
// accumulation. The algorithm for each shape is chosen once and then fixed, and split-K schemes
// that reduce with atomics are excluded, so the same inputs give the same bits on every run.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <thread>
#include <tuple>

#include "kernels/device_buffer.h"
#include "kernels/ops.h"

namespace hearth::kernels {

class Gemm {
 public:
  explicit Gemm(Half type);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  enum class Out { Half, F32, F32Accumulate };
  Half type() const { return type_; }
  // Pays cuBLASLt's one-time set-up ahead of the first run(), which then only plans its shape:
  // the 16-bit-in, fp32-out heuristics before returning (~50 ms on an H100), the 16-bit-output
  // ones (~110 ms; short prefills never use them) on a thread this object joins when destroyed.
  void warm_up();
  // W row-major [n, k]; x row-major [m, k]; out row-major [m, n] (16-bit or fp32).
  void run(const void* w, const void* x, void* out, int m, int n, int k, Out out_type,
           cudaStream_t stream);

 private:
  struct Plan;
  Plan& plan_for(int m, int n, int k, Out out_type);
  std::unique_ptr<Plan> make_plan(int m, int n, int k, Out out_type) const;

  Half type_;
  void* handle_ = nullptr;  // cublasLtHandle_t
  std::thread half_out_warmup_;
  DeviceBuffer workspace_;
  std::map<std::tuple<int, int, int, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace hearth::kernels
