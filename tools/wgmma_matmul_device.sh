#!/bin/bash
# One device run for the wgmma matmul (issue 23 item 1): its tests, the GPU tests of the kernels
# and batched engine that use batch_matmul (present in BIN), then the benchmark against cuBLASLt
# and the mma.sync kernel. Usage (on the GPU machine, from the repository root):
# tools/wgmma_matmul_device.sh BIN [BUILT_AT], where BIN holds the test binaries and
# hearth-matmul-bench, and BUILT_AT is the source directory they were built in (the golden tests
# read tests/golden there: it is linked to this checkout's). Logs go to $OUT.
set -u
BIN=$1
OUT=${OUT:-/tmp}
if [ -n "${2:-}" ] && [ ! -e "$2/tests/golden" ]; then
  mkdir -p "$2/tests" && ln -s "$PWD/tests/golden" "$2/tests/golden"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1
for t in wgmma_matmul_tests batch_kernel_tests kernel_tests cuda_batch_tests cuda_engine_tests; do
  [ -x "$BIN/$t" ] || continue
  timeout 120 "$BIN/$t" >"$OUT/$t.log" 2>&1
  echo "$t rc $? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Z]" "$OUT/$t.log" | head -5
done
HEARTH_WGMMA_DEBUG=1 timeout 170 "$BIN/hearth-matmul-bench" --all-tiles --json "$OUT/bench.json" >"$OUT/bench.md" 2>"$OUT/bench.err"
echo "bench rc $?"
cat "$OUT/gpu.txt"
cat "$OUT/bench.md"
