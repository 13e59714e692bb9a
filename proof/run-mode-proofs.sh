#!/usr/bin/env bash
# Served == single-process and 1 == N concurrent workers, byte for byte, over the built-in
# suites. For each suite and profile, hearth-proof runs four times — single-process and served,
# with 1 and with N workers at a time; every profile twice, so each run is also checked against
# its own repeat — and the reports are diffed, by tokens and by bit-identical logprobs: single
# vs served (at 1 and at N workers) and 1 vs N workers (in both modes). The short, code and multilingual suites run on the default
# model; the long suite (prompts of 2-4k tokens) on a seeded synthetic Llama written with the
# default model's tokenizer, since the default model's context is only 512.
#
# Usage: proof/run-mode-proofs.sh OUT      (from anywhere; uses the checkout it lives in)
# Environment (defaults): BIN=build/bin BUDGET=256 CONCURRENCY=8 BACKEND=auto (the server's:
#   vmm on a GPU) SUITES="short code multilingual long" PROFILES="greedy sampled"
#   LONG_PRESET=llama-3.2-1b MODELS=/tmp/hearth-proof-models TIMEOUT=600
# Writes OUT/<suite>/<profile>/{single,served}-c{1,N}/ (reports), OUT/<suite>/<profile>/diff-*/
# and OUT/SUMMARY-<suites>.md; exits 0 only if every run passes and every diff finds nothing
# changed. SUITES=short, SUITES=long, ... split the work into shorter invocations.
set -uo pipefail
out=${1:?usage: proof/run-mode-proofs.sh OUT}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$root" && realpath "${BIN:-build/bin}")
budget=${BUDGET:-256}
conc=${CONCURRENCY:-8}
backend=${BACKEND:-auto}
suites=${SUITES:-short code multilingual long}
profiles=${PROFILES:-greedy sampled}
long_preset=${LONG_PRESET:-llama-3.2-1b}
models=${MODELS:-/tmp/hearth-proof-models}
timeout=${TIMEOUT:-600}
mkdir -p "$out"
out=$(realpath "$out")
summary=$out/SUMMARY-${suites// /-}.md  # one per suite selection, so runs split by suite keep theirs
default_model=$root/models/hearth-tiny-fortunes

for tool in hearth-proof hearth-worker hearth-server hearth-synth; do
  [[ -x $bin/$tool ]] || { echo "run-mode-proofs: $bin/$tool is missing; build it (or set BIN)" >&2; exit 2; }
done

server_models=(--model "$default_model:fortunes")
if [[ " $suites " == *" long "* ]]; then
  long_model=$models/$long_preset
  if [[ ! -f $long_model/config.json ]]; then
    echo "run-mode-proofs: writing the synthetic $long_preset model to $long_model" >&2
    "$bin/hearth-synth" --preset "$long_preset" --tokenizer "$default_model/tokenizer.json" --out "$long_model" || exit 2
  fi
  server_models+=(--model "$long_model:long")
fi

sockdir=$(mktemp -d)
"$bin/hearth-server" --backend "$backend" --socket "$sockdir/hearth.sock" "${server_models[@]}" \
  >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$sockdir"' EXIT
for _ in $(seq 6000); do
  [[ -S $sockdir/hearth.sock ]] && break
  kill -0 $server 2>/dev/null || { echo "run-mode-proofs: hearth-server failed:" >&2; cat "$out/server.log" >&2; exit 2; }
  sleep 0.1
done
[[ -S $sockdir/hearth.sock ]] || { echo "run-mode-proofs: hearth-server did not start" >&2; exit 2; }

failures=0
{
  echo "# Mode proofs: served vs single-process, 1 vs $conc workers"
  echo
  echo "budget $budget, server backend $backend, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git -C "$root" rev-parse HEAD)"
  echo
} >"$summary"
record() {  # record STATUS LINE
  echo "- \`$2\`" >>"$summary"
  echo "$2"
  [[ $1 == 0 ]] || failures=$((failures + 1))
}

for suite in $suites; do
  if [[ $suite == long ]]; then dir_model=$long_model; served_name=long; else dir_model=$default_model; served_name=fortunes; fi
  for profile in $profiles; do
    base=$out/$suite/$profile
    echo >>"$summary"
    echo "## $suite / $profile" >>"$summary"
    for mode in single served; do
      for c in 1 "$conc"; do
        if [[ $mode == single ]]; then model_args=(--model "$dir_model"); else model_args=(--server "$sockdir/hearth.sock" --model "$served_name"); fi
        line=$("$bin/hearth-proof" run --suite "$suite" --budget "$budget" --profile "$root/proof/profiles/$profile.json" \
          --repeat 2 --concurrency "$c" --timeout "$timeout" "${model_args[@]}" --out "$base/$mode-c$c" --quiet)
        record $? "$mode-c$c: $line"
      done
    done
    # exact: the tokens (the guarantee); logprob:0: bit-identical logprobs too, which also
    # catches numeric drift that a degenerate (synthetic-model) token stream would hide.
    for pair in "single-c1 served-c1" "single-c$conc served-c$conc" "single-c1 single-c$conc" "served-c1 served-c$conc"; do
      set -- $pair
      for contract in exact logprob:0; do
        line=$("$bin/hearth-proof" diff "$base/$1" "$base/$2" --contract "$contract" --out "$base/diff-$1-vs-$2-${contract%%:*}")
        record $? "diff $1 vs $2: $line"
      done
    done
  done
done

echo >>"$summary"
if [[ $failures == 0 ]]; then
  echo "**All runs pass and every diff is SAME.**" >>"$summary"
else
  echo "**$failures run(s) or diff(s) did not pass; see the reports.**" >>"$summary"
fi
echo "run-mode-proofs: $failures failure(s); summary in $summary"
[[ $failures == 0 ]]
