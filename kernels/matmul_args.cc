// The argument checks batch_matmul (mma.sync) and wgmma_matmul share, so the two kernels refuse
// the same calls with the same words.
#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/batch_ops.h"

namespace hearth::kernels {

int64_t checked_matmul_lda(const char* kernel, MatmulEpilogue epilogue, const MatmulArgs& a) {
  auto fail = [kernel](const std::string& what) {
    throw std::invalid_argument(std::string(kernel) + ": " + what);
  };
  auto aligned16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  const bool swiglu = epilogue == MatmulEpilogue::SwiGLU;
  if (a.m < 1 || a.n < 1)
    fail("m and n must be positive (m " + std::to_string(a.m) + ", n " + std::to_string(a.n) + ")");
  if (a.k < 16 || a.k % 16 != 0)
    fail("k must be a positive multiple of 16, not " + std::to_string(a.k));
  const int64_t lda = a.lda ? a.lda : a.k;
  if (lda < a.k || lda % 8 != 0)
    fail("lda (" + std::to_string(lda) + ") must be >= k and a multiple of 8");
  if (!a.a || !a.w || !a.out) fail("a, w and out are required");
  check_a_rows_readable(kernel, a.a_rows_readable, a.m);
  if (!aligned16(a.a) || !aligned16(a.w) || (a.w_up && !aligned16(a.w_up)))
    fail("a and the weights must be 16-byte aligned");
  if (swiglu && !a.w_up) fail("SwiGLU needs w_up");
  if (swiglu && a.bias) fail("SwiGLU takes no bias");
  for (const MatmulSegment& s : a.more) {
    if (!s.w) continue;
    if (swiglu) fail("SwiGLU takes one weight pair, not more segments");
    if (s.n < 1 || !s.out) fail("a further segment needs n > 0 and out");
    if (!aligned16(s.w)) fail("a and the weights must be 16-byte aligned");
  }
  return lda;
}

void check_a_rows_readable(const char* kernel, int readable, int m) {
  if (readable != 0 && readable < m)
    throw std::invalid_argument(std::string(kernel) + ": a_rows_readable (" +
                                std::to_string(readable) + ") must be 0 or >= m (" +
                                std::to_string(m) + ")");
}

int a_map_rows(int m, int readable, int tile_rows) {
  const int64_t whole = (int64_t(m) + tile_rows - 1) / tile_rows * tile_rows;
  return int(std::max<int64_t>(m, std::min<int64_t>(whole, readable)));
}

int matmul_segments(const MatmulArgs& a, std::array<MatmulSegment, 3>& out) {
  int n = 0;
  out[n++] = MatmulSegment{a.w, a.bias, a.out, a.n};
  for (const MatmulSegment& s : a.more)
    if (s.w) out[n++] = s;
  return n;
}

}  // namespace hearth::kernels
