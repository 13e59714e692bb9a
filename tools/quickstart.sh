#!/usr/bin/env bash
# The README's main job: installs what is missing, builds hearth, starts a weight server holding
# the embedded default model and runs three workers with different profiles at once, streaming
# their text. With a GPU: CUDA VMM weights and the CUDA engine. Without: memfd weights and the
# CPU engine (said so below). Usage: tools/quickstart.sh [prompt]
set -euo pipefail
cd "$(dirname "$0")/.."
prompt=${1:-"The meaning of life is"}
tools/install-deps.sh
echo "== building (first time: a few minutes)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target hearth-server hearth-worker

model=models/hearth-tiny-fortunes
bin=build/bin
if nvidia-smi -L >/dev/null 2>&1 && ls build/CMakeFiles/*/CMakeCUDACompiler.cmake >/dev/null 2>&1; then
  backend=vmm engine=cuda
  echo "== a GPU is present: weights in CUDA VMM allocations, CUDA engine"
else
  backend=memfd engine=cpu
  echo "== no GPU here: weights in sealed memfd allocations, CPU engine"
fi

run_dir=$(mktemp -d)
socket=$run_dir/hearth.sock
cleanup() {
  [ -n "${server:-}" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$run_dir"
}
trap cleanup EXIT
"$bin/hearth-server" --model "$model:fortunes" --socket "$socket" --backend "$backend" 2> "$run_dir/server.log" &
server=$!
for _ in $(seq 300); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || { cat "$run_dir/server.log" >&2; echo "the weight server did not start" >&2; exit 1; }
grep -E "loaded|ready" "$run_dir/server.log" || true

# Three profiles, one shared copy of the weights, all at once: the long answer streams here as
# it is generated, the other two are shown when they finish.
worker() {  # hearth-worker flags...
  "$bin/hearth-worker" --server "$socket" --model fortunes --backend "$engine" --prompt "$prompt" "$@"
}
echo "== prompt: $prompt"
worker --temperature 0 --max-tokens 64 > "$run_dir/greedy.txt" 2>&1 & greedy=$!
worker --temperature 0.8 --top-p 0.95 --seed 7 --max-tokens 64 > "$run_dir/warm.txt" 2>&1 & warm=$!
echo; echo "== long (temperature 0.7, top-k 40, 300 tokens), streaming"
printf '%s' "$prompt"
status=0
worker --temperature 0.7 --top-k 40 --seed 3 --max-tokens 300 --set ignore_eos=true || status=1
for name in greedy warm; do
  wait "${!name}" || status=1
  echo; echo "== $name"
  printf '%s' "$prompt"; cat "$run_dir/$name.txt"
done
echo; echo "== server log"; grep -c "lease of" "$run_dir/server.log" | xargs echo "leases served and released:"
exit $status
