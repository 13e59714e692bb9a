#!/usr/bin/env bash
# The README's main job: installs what is missing, builds hearth, starts hearth-gateway on the
# embedded default model (its own weight server, batching workers started on demand) and sends
# it three requests at once with curl: a greedy completion, a sampled chat, and a streamed
# completion through a second engine profile. With a GPU: CUDA VMM weights and the CUDA engine.
# Without: memfd weights and the CPU engine (said so below). Usage: tools/quickstart.sh [prompt]
set -euo pipefail
cd "$(dirname "$0")/.."
prompt=${1:-"The meaning of life is"}
tools/install-deps.sh
command -v curl >/dev/null || { echo "quickstart: curl is needed to talk to the gateway" >&2; exit 1; }
echo "== building (first time: a few minutes)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" >/dev/null
cmake --build build -j"$(nproc)" --target hearth-gateway hearth-server hearth-worker

model=models/hearth-tiny-fortunes
bin=build/bin
if nvidia-smi -L >/dev/null 2>&1 && ls build/CMakeFiles/*/CMakeCUDACompiler.cmake >/dev/null 2>&1; then
  backend=auto engine=cuda
  echo "== a GPU is present: weights in CUDA VMM allocations, CUDA engine"
else
  backend=memfd engine=cpu
  echo "== no GPU here: weights in sealed memfd allocations, CPU engine"
fi

run_dir=$(mktemp -d)
cleanup() {
  [ -n "${gateway:-}" ] && kill "$gateway" 2>/dev/null && wait "$gateway" 2>/dev/null
  rm -rf "$run_dir"
}
trap cleanup EXIT
# A second engine profile: small prompt chunks (a worker of its own on the same weights).
echo '{"max_batch_tokens": 64}' > "$run_dir/small-chunks.json"
"$bin/hearth-gateway" --model "$model:fortunes" --backend "$backend" --port 0 \
  --profile small="$run_dir/small-chunks.json" --worker-arg=--backend --worker-arg="$engine" \
  --chat-template gateway/templates/plain.jinja \
  > "$run_dir/gateway.out" 2> "$run_dir/gateway.log" &
gateway=$!
for _ in $(seq 600); do grep -q "^listening on" "$run_dir/gateway.out" 2>/dev/null && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$run_dir/gateway.out")
[ -n "$url" ] || { cat "$run_dir/gateway.log" >&2; echo "the gateway did not start" >&2; exit 1; }
echo "== hearth-gateway at $url (OpenAI API: /v1/completions, /v1/chat/completions, /v1/models)"

post() {  # path json
  curl -sS --fail-with-body "$url$1" -H 'Content-Type: application/json' -d "$2"
}
json_prompt=$(printf '%s' "$prompt" | sed 's/\\/\\\\/g; s/"/\\"/g')
echo "== three requests at once: greedy, sampled chat, streamed through the 'small' profile"
post /v1/completions "{\"model\": \"fortunes\", \"prompt\": \"$json_prompt\", \"max_tokens\": 48, \"temperature\": 0}" \
  > "$run_dir/greedy.json" & a=$!
post /v1/chat/completions "{\"model\": \"fortunes\", \"messages\": [{\"role\": \"user\", \"content\": \"$json_prompt\"}], \"max_tokens\": 48, \"temperature\": 0.8, \"seed\": 7}" \
  > "$run_dir/chat.json" & b=$!
echo; echo "== streamed (fortunes:small, temperature 0.7, 200 tokens)"
printf '%s' "$prompt"
post /v1/completions "{\"model\": \"fortunes:small\", \"prompt\": \"$json_prompt\", \"max_tokens\": 200, \"temperature\": 0.7, \"seed\": 3, \"ignore_eos\": true, \"stream\": true}" |
  sed -un 's/^data: //p' | grep -v '^\[DONE\]' |
  python3 -c 'import json,sys
for line in sys.stdin:
    print(json.loads(line)["choices"][0]["text"], end="", flush=True)'
echo
status=0
wait $a || status=1
wait $b || status=1
echo; echo "== greedy completion"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2] + r["choices"][0]["text"]); print("usage:", r["usage"])' "$run_dir/greedy.json" "$prompt" || status=1
echo; echo "== sampled chat"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["choices"][0]["message"]["content"]); print("usage:", r["usage"])' "$run_dir/chat.json" || status=1
echo; echo "== metrics"
curl -sS "$url/metrics" | grep -E '^hearth:(workers_alive|generation_tokens_total|request_success_total)' || true
exit $status
