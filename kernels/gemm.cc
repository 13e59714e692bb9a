#include "kernels/gemm.h"

#include <cublasLt.h>

#include <stdexcept>
#include <string>

namespace hearth::kernels {

namespace {

constexpr size_t kWorkspaceBytes = 32ull << 20;

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt error in ") + what + ": " +
                             cublasLtGetStatusString(status));
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
    if (op) cublasLtMatmulDescDestroy(op);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

Gemm::Gemm(Half type) : type_(type), workspace_(kWorkspaceBytes) {
  cublasLtHandle_t h;
  check(cublasLtCreate(&h), "cublasLtCreate");
  handle_ = h;
}

Gemm::~Gemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

Gemm::Plan& Gemm::plan_for(int m, int n, int k, Out out_type) {
  auto key = std::make_tuple(m, n, k, int(out_type));
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;

  // Column-major view: out^T [n, m] = W [k, n]^T . x^T [k, m], the "TN" layout.
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t in = data_type(type_);
  const cudaDataType_t out = out_type == Out::Half ? in : CUDA_R_32F;
  check(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  check(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa),
      "TRANSA");
  check(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb),
      "TRANSB");
  check(cublasLtMatrixLayoutCreate(&plan->a, in, k, n, k), "layout A");
  check(cublasLtMatrixLayoutCreate(&plan->b, in, k, m, k), "layout B");
  check(cublasLtMatrixLayoutCreate(&plan->c, out, n, m, n), "layout C");
  plan->beta = out_type == Out::F32Accumulate ? 1.0f : 0.0f;

  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  const uint64_t ws = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws),
        "MAX_WORKSPACE");
  // In-place split-K reductions accumulate with atomics in an unspecified order: excluded.
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                           CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                             &schemes, sizeof schemes),
        "REDUCTION_SCHEME_MASK");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), plan->op, plan->a,
                                     plan->b, plan->c, plan->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check(st, "AlgoGetHeuristic");
  if (found == 0)
    throw std::runtime_error("cuBLASLt has no algorithm for a " + std::to_string(m) + "x" +
                             std::to_string(n) + "x" + std::to_string(k) + " matmul");
  plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void Gemm::run(const void* w, const void* x, void* out, int m, int n, int k, Out out_type,
               cudaStream_t stream) {
  Plan& p = plan_for(m, n, k, out_type);
  const float alpha = 1.0f;
  check(
      cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, w, p.a, x, p.b, &p.beta,
                     out, p.c, out, p.c, &p.algo, workspace_.get(), workspace_.bytes(), stream),
      "cublasLtMatmul");
}

}  // namespace hearth::kernels
