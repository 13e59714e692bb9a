#include "kernels/gemm.h"

#include <stdexcept>
#include <string>
#include <thread>

#include "kernels/cublaslt_library.h"

namespace hearth::kernels {

namespace {

constexpr size_t kWorkspaceBytes = 32ull << 20;

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt error in ") + what + ": " +
                             cublaslt().status_string(status));
}

cudaDataType_t data_type(Half t) {
  return t == Half::BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  float beta = 0.0f;
  ~Plan() {
    const CublasLtLibrary& lt = cublaslt();
    if (op) lt.desc_destroy(op);
    if (a) lt.layout_destroy(a);
    if (b) lt.layout_destroy(b);
    if (c) lt.layout_destroy(c);
  }
};

Gemm::Gemm(Half type) : type_(type), workspace_(kWorkspaceBytes) {
  cublasLtHandle_t h;
  check(cublaslt().create(&h), "cublasLtCreate");
  handle_ = h;
}

Gemm::~Gemm() {
  if (half_out_warmup_.joinable()) half_out_warmup_.join();
  plans_.clear();
  if (handle_) cublaslt().destroy(static_cast<cublasLtHandle_t>(handle_));
}

void Gemm::warm_up() {
  // cuBLASLt sets up its heuristics once per combination of types, on the first query; a
  // throwaway query pays it. The two run side by side (cuBLASLt handles are thread-safe); a
  // failure of the background one resurfaces when run() first asks for a 16-bit output.
  int device = 0;
  cudaGetDevice(&device);
  if (!half_out_warmup_.joinable())
    half_out_warmup_ = std::thread([this, device] {
      cudaSetDevice(device);  // heuristics are per device
      try {
        make_plan(1, 64, 64, Out::Half);
      } catch (...) {
      }
    });
  make_plan(1, 64, 64, Out::F32);
}

Gemm::Plan& Gemm::plan_for(int m, int n, int k, Out out_type) {
  auto key = std::make_tuple(m, n, k, int(out_type));
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  return *plans_.emplace(key, make_plan(m, n, k, out_type)).first->second;
}

std::unique_ptr<Gemm::Plan> Gemm::make_plan(int m, int n, int k, Out out_type) const {
  const CublasLtLibrary& lt = cublaslt();
  // Column-major view: out^T [n, m] = W [k, n]^T . x^T [k, m], the "TN" layout.
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t in = data_type(type_);
  const cudaDataType_t out = out_type == Out::Half ? in : CUDA_R_32F;
  check(lt.desc_create(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  check(lt.desc_set(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa), "TRANSA");
  check(lt.desc_set(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb), "TRANSB");
  check(lt.layout_create(&plan->a, in, k, n, k), "layout A");
  check(lt.layout_create(&plan->b, in, k, m, k), "layout B");
  check(lt.layout_create(&plan->c, out, n, m, n), "layout C");
  plan->beta = out_type == Out::F32Accumulate ? 1.0f : 0.0f;

  cublasLtMatmulPreference_t pref;
  check(lt.preference_create(&pref), "PreferenceCreate");
  const uint64_t ws = kWorkspaceBytes;
  check(lt.preference_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
        "MAX_WORKSPACE");
  // In-place split-K reductions accumulate with atomics in an unspecified order: excluded.
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                           CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  check(
      lt.preference_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes),
      "REDUCTION_SCHEME_MASK");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = lt.heuristic(static_cast<cublasLtHandle_t>(handle_), plan->op, plan->a,
                                         plan->b, plan->c, plan->c, pref, 1, &result, &found);
  lt.preference_destroy(pref);
  check(st, "AlgoGetHeuristic");
  if (found == 0)
    throw std::runtime_error("cuBLASLt has no algorithm for a " + std::to_string(m) + "x" +
                             std::to_string(n) + "x" + std::to_string(k) + " matmul");
  plan->algo = result.algo;
  return plan;
}

void Gemm::run(const void* w, const void* x, void* out, int m, int n, int k, Out out_type,
               cudaStream_t stream) {
  Plan& p = plan_for(m, n, k, out_type);
  const float alpha = 1.0f;
  check(cublaslt().matmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, w, p.a, x, p.b,
                          &p.beta, out, p.c, out, p.c, &p.algo, workspace_.get(),
                          workspace_.bytes(), stream),
        "cublasLtMatmul");
}

}  // namespace hearth::kernels
