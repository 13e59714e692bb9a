#!/bin/bash
# One device run for the wgmma matmul (issue 23 item 1): its tests, then the benchmark against
# cuBLASLt and the mma.sync kernel. Usage (on the GPU machine): tools/wgmma_matmul_device.sh BIN
# where BIN holds wgmma_matmul_tests and hearth-matmul-bench; logs go to $OUT.
set -u
BIN=$1
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1
timeout 150 "$BIN/wgmma_matmul_tests" >"$OUT/tests.log" 2>&1
echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|Failure|Expected|m [0-9]+ first" "$OUT/tests.log" | head -20
timeout 120 "$BIN/hearth-matmul-bench" --all-tiles --json "$OUT/bench.json" >"$OUT/bench.md" 2>&1
echo "bench rc $?"
cat "$OUT/gpu.txt"
cat "$OUT/bench.md"
