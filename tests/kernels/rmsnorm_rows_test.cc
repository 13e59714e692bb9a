// rmsnorm_rows (issue 23): the head's gather and final norm in one launch give the bytes of
// gather_rows then rmsnorm, on fresh random rows at widths of each of rmsnorm's block sizes,
// with rows picked in any order, repeated, and the last one.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/ops.h"
#include "kernels/rmsnorm_rows.h"
#include "tests/kernels/gpu_test_util.h"

namespace hearth {
namespace {

using kernels::Half;
using namespace hearth::test;

TEST(RmsnormRows, EqualsGatherThenRmsnormByteForByte) {
  HEARTH_REQUIRE_GPU();
  struct Case {
    int tokens, hidden;
    std::vector<int32_t> rows;
  };
  const Case cases[] = {
      {1, 4096, {0}},          {9, 4096, {8, 3, 3, 0}},  {300, 5120, {299, 17, 150, 0, 1, 298}},
      {40, 1024, {39, 0, 20}}, {12, 896, {11, 5, 6, 7}}, {5, 130, {4, 4, 1}}};
  for (Half t : {Half::BF16, Half::F16})
    for (const Case& c : cases) {
      const int n = int(c.rows.size());
      const auto x = upload(random_floats(size_t(c.tokens) * c.hidden, 3.0f));
      const auto w = upload(random_floats(c.hidden));
      const auto idx = upload(c.rows);
      DeviceBuffer gathered(size_t(n) * c.hidden * 4);
      auto want = poisoned(size_t(n) * c.hidden * 2), got = poisoned(size_t(n) * c.hidden * 2);
      kernels::gather_rows(x.get<float>(), idx.get<int32_t>(), n, c.hidden, gathered.get<float>(),
                           nullptr);
      kernels::rmsnorm(t, gathered.get<float>(), w.get<float>(), n, c.hidden, 1e-5f, want.get(),
                       nullptr);
      kernels::rmsnorm_rows(t, x.get<float>(), idx.get<int32_t>(), w.get<float>(), n, c.hidden,
                            1e-5f, got.get(), nullptr);
      const auto a = download<uint8_t>(want, want.bytes()), b = download<uint8_t>(got, got.bytes());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0)
          << name(t) << " hidden " << c.hidden << " rows " << n;
      // Written, not the poison: a row normed from random values is never all 0xFF bytes.
      EXPECT_NE(b[0] & b[1], 0xFF);
    }
}

TEST(RmsnormRows, RefusesBadArguments) {
  float f = 0;
  int32_t i = 0;
  EXPECT_THROW(kernels::rmsnorm_rows(Half::BF16, &f, &i, &f, -1, 8, 1e-5f, &f, nullptr),
               std::invalid_argument);
  EXPECT_THROW(kernels::rmsnorm_rows(Half::BF16, &f, &i, &f, 1, 0, 1e-5f, &f, nullptr),
               std::invalid_argument);
  EXPECT_THROW(kernels::rmsnorm_rows(Half::BF16, &f, nullptr, &f, 1, 8, 1e-5f, &f, nullptr),
               std::invalid_argument);
  // No rows: nothing to do.
  EXPECT_NO_THROW(kernels::rmsnorm_rows(Half::BF16, &f, &i, &f, 0, 8, 1e-5f, &f, nullptr));
}

}  // namespace
}  // namespace hearth
