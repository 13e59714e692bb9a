// The matmul arguments both wgmma kernels share (kernels/batch_ops.h) that are plain host code:
// the rows their A descriptor spans and the check of the rows a caller lets them read.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "kernels/batch_ops.h"

namespace hearth::kernels {
namespace {

TEST(MatmulArgs, TheADescriptorSpansWholeTilesWhereTheRowsMayBeRead) {
  EXPECT_EQ(a_map_rows(65, 0, 128), 65);      // nothing past m may be read
  EXPECT_EQ(a_map_rows(65, 2048, 128), 128);  // one whole tile
  EXPECT_EQ(a_map_rows(65, 100, 128), 100);   // as far as the buffer goes
  EXPECT_EQ(a_map_rows(128, 2048, 128), 128);
  EXPECT_EQ(a_map_rows(1, 2048, 16), 16);
  EXPECT_EQ(a_map_rows(33, 2048, 48), 48);
  EXPECT_EQ(a_map_rows(2047, 2048, 128), 2048);
}

TEST(MatmulArgs, FewerReadableRowsThanMAreRefusedNamingTheKernel) {
  EXPECT_NO_THROW(check_a_rows_readable("k", 0, 4));
  EXPECT_NO_THROW(check_a_rows_readable("k", 4, 4));
  try {
    check_a_rows_readable("fp8_matmul", 3, 4);
    ADD_FAILURE() << "3 readable rows for m 4 were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "fp8_matmul: a_rows_readable (3) must be 0 or >= m (4)");
  }
  // Through the checks batch_matmul and wgmma_matmul make (no device memory is touched).
  alignas(16) static char buffer[64];
  MatmulArgs args;
  args.a = buffer, args.w = buffer, args.out = buffer, args.m = 4, args.n = 8, args.k = 16;
  EXPECT_EQ(checked_matmul_lda("wgmma_matmul", MatmulEpilogue::StoreF32, args), 16);
  args.a_rows_readable = 3;
  EXPECT_THROW(checked_matmul_lda("wgmma_matmul", MatmulEpilogue::StoreF32, args),
               std::invalid_argument);
}

}  // namespace
}  // namespace hearth::kernels
