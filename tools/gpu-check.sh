#!/usr/bin/env bash
# Runs the GPU half of hearth's evidence on a machine with a CUDA device: the GPU-labelled
# tests, then hearth-bench on seeded synthetic models with the shapes of Llama-3.2-1B and
# Llama-3.1-8B, (serve) the batched engine's serving benchmark on them, and (prefix) the
# prefix-caching workload on them (hearth-bench --serve-bench --shared-prefix 2000).
# Usage: tools/gpu-check.sh BIN_DIR OUT_DIR [tests|bench|serve|prefix|all]
# HEARTH_BENCH_PRESETS picks the models (default: llama-3.2-1b llama-3.1-8b).
set -uo pipefail
bin=$(cd "$1" && pwd); out=$2; what=${3:-all}
mkdir -p "$out"
export HEARTH_SOURCE_DIR=$(cd "$(dirname "$0")/.." && pwd)
models=${HEARTH_BENCH_MODELS:-/tmp/hearth-models}
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"

if [ "$what" = tests ] || [ "$what" = all ]; then
  for t in kernel_tests cuda_engine_tests cuda_batch_tests; do
    echo "== $t"
    "$bin/$t" --gtest_brief=1 2>&1 | tee "$out/$t.log" | grep -vE "^\[ +(RUN|OK) " | tail -40
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi

presets=${HEARTH_BENCH_PRESETS:-llama-3.2-1b llama-3.1-8b}
if [ "$what" = bench ] || [ "$what" = all ]; then
  for preset in $presets; do
    [ -f "$models/$preset/config.json" ] || "$bin/hearth-synth" --preset "$preset" --out "$models/$preset" 2>&1 | tail -1
    echo "== bench $preset"
    "$bin/hearth-bench" --model "$models/$preset" --json "$out/bench-$preset.json" ${HEARTH_BENCH_ARGS:-} \
      > "$out/bench-$preset.txt" 2> >(tee "$out/bench-$preset.err" | grep -v "^upload" >&2) || status=1
    grep "^|" "$out/bench-$preset.txt"
  done
fi
if [ "$what" = serve ] || [ "$what" = all ]; then
  for preset in $presets; do
    [ -f "$models/$preset/config.json" ] || "$bin/hearth-synth" --preset "$preset" --out "$models/$preset" 2>&1 | tail -1
    echo "== serve $preset"
    "$bin/hearth-bench" --serve-bench --model "$models/$preset" --json "$out/serve-$preset.json" \
      ${HEARTH_SERVE_ARGS:-} > "$out/serve-$preset.txt" 2> >(tee "$out/serve-$preset.err" | grep -v "^upload" >&2) || status=1
    grep "^|" "$out/serve-$preset.txt"
  done
fi
if [ "$what" = prefix ] || [ "$what" = all ]; then
  for preset in $presets; do
    [ -f "$models/$preset/config.json" ] || "$bin/hearth-synth" --preset "$preset" --out "$models/$preset" 2>&1 | tail -1
    echo "== prefix $preset"
    "$bin/hearth-bench" --serve-bench --shared-prefix 2000 --model "$models/$preset" \
      --json "$out/prefix-$preset.json" ${HEARTH_PREFIX_ARGS:-} > "$out/prefix-$preset.txt" \
      2> >(tee "$out/prefix-$preset.err" | grep -v "^upload" >&2) || status=1
    grep -E "^\||cache off / on" "$out/prefix-$preset.txt"
  done
fi
exit $status
