#!/usr/bin/env bash
# Served == single-process, 1 == N concurrent workers and batched == alone, byte for byte, over
# the built-in suites. For each suite and profile, hearth-proof runs single-process and served,
# with 1 and with N workers at a time and batched (every prompt and repeat a request of one
# `hearth-worker --requests`); every profile twice, so each run is also checked against its own
# repeat. The reports are diffed, by tokens and by bit-identical logprobs: single vs served (for
# every way of running) and, in each mode, 1 worker against N workers and against batched. The
# short, code and multilingual suites run on the default model; the long suite (prompts of 2-4k
# tokens) on a seeded synthetic Llama written with the default model's tokenizer, since the
# default model's context is only 512.
#
# Usage: proof/run-mode-proofs.sh OUT      (from anywhere; uses the checkout it lives in)
# Environment (defaults): BIN=build/bin BUDGET=256 CONCURRENCY=8 BACKEND=auto (the server's:
#   vmm on a GPU) SUITES="short code multilingual long" PROFILES="greedy sampled"
#   MODES="single served" RUNS="1 $CONCURRENCY batched" PROFILE_DIR=proof/profiles
#   LONG_PRESET=llama-3.2-1b MODEL_PRESET= MODELS=/tmp/hearth-proof-models TIMEOUT=600
# PROFILES entries name PROFILE_DIR/<name>.json; "greedy+sampled" runs both profiles in one
# hearth-proof run (so batched, in one worker), which then passes when no run failed and every
# repeat holds (the profiles themselves differ; python3 reads the report). RUNS entries are a number of workers at once or
# "batched"; the first is the reference the others are diffed against. MODEL_PRESET runs every
# suite on that synthetic preset (e.g. llama-3.1-8b) instead of the default model; MODEL_SET
# (space-separated KEY=VALUE, hearth-synth --set) changes its config: MODEL_SET="num_hidden_layers=2
# vocab_size=4096" gives the 8B's widths, whose launches reach the kernels only its shapes take
# (the streaming decode tile), in a 0.9 GB model.
# Writes OUT/<suite>/<profiles>/<mode>-{c1,cN,batched}/ (reports), OUT/<suite>/<profiles>/diff-*/
# and OUT/SUMMARY-<suites>.md (every verdict line, then a table); exits 0 only if every run
# passes and every diff finds nothing changed. SUITES=short, SUITES=long, ... split the work
# into shorter invocations.
set -uo pipefail
out=${1:?usage: proof/run-mode-proofs.sh OUT}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$root" && realpath "${BIN:-build/bin}")
budget=${BUDGET:-256}
conc=${CONCURRENCY:-8}
backend=${BACKEND:-auto}
suites=${SUITES:-short code multilingual long}
profiles=${PROFILES:-greedy sampled}
modes=${MODES:-single served}
runs=${RUNS:-1 $conc batched}
profile_dir=$(cd "$root" && realpath "${PROFILE_DIR:-proof/profiles}")
long_preset=${LONG_PRESET:-llama-3.2-1b}
model_preset=${MODEL_PRESET:-}
model_set=${MODEL_SET:-}
models=${MODELS:-/tmp/hearth-proof-models}
timeout=${TIMEOUT:-600}
mkdir -p "$out"
out=$(realpath "$out")
summary=$out/SUMMARY-${suites// /-}.md  # one per suite selection, so runs split by suite keep theirs
default_model=$root/models/hearth-tiny-fortunes

for tool in hearth-proof hearth-worker hearth-server hearth-synth; do
  [[ -x $bin/$tool ]] || { echo "run-mode-proofs: $bin/$tool is missing; build it (or set BIN)" >&2; exit 2; }
done

synth_model() {  # synth_model PRESET [KEY=VALUE...]: the synthetic model's directory, written once
  local preset=$1 dir=$models/$1 settings=() kv
  shift
  for kv in "$@"; do settings+=(--set "$kv"); dir+="_${kv//[^A-Za-z0-9._-]/-}"; done
  if [[ ! -f $dir/config.json ]]; then
    echo "run-mode-proofs: writing the synthetic $preset model to $dir" >&2
    "$bin/hearth-synth" --preset "$preset" "${settings[@]}" --tokenizer "$default_model/tokenizer.json" \
      --out "$dir" >&2 || exit 2
  fi
  echo "$dir"
}
# short_*: the model of the short, code and multilingual suites; long_*: the long suite's.
if [[ -n $model_preset ]]; then
  # shellcheck disable=SC2086  # MODEL_SET splits into its settings
  short_model=$(synth_model "$model_preset" $model_set) || exit 2
  short_name=$model_preset long_model=$short_model long_name=$model_preset
  server_models=(--model "$short_model:$short_name")
else
  short_model=$default_model short_name=fortunes long_model="" long_name=long
  server_models=(--model "$short_model:$short_name")
  if [[ " $suites " == *" long "* ]]; then
    long_model=$(synth_model "$long_preset") || exit 2
    server_models+=(--model "$long_model:$long_name")
  fi
fi

sockdir=$(mktemp -d)
trap 'rm -rf "$sockdir"' EXIT
if [[ " $modes " == *" served "* ]]; then  # the server only when something runs served
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
fi

failures=0
{
  echo "# Mode proofs: served vs single-process, 1 vs $conc workers, batched vs alone"
  echo
  echo "budget $budget, server backend $backend, modes $modes, runs $runs, profiles from $profile_dir${model_preset:+, every suite on synthetic $model_preset${model_set:+ ($model_set)}}, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git -C "$root" rev-parse HEAD)"
  echo
} >"$summary"
# The table: a row per run or diff, a column per suite and profiles, the verdict word in each.
declare -A cells
row_names=()
columns=""
record() {  # record STATUS NAME LINE [WORD]
  echo "- \`$2: $3\`" >>"$summary"
  echo "$2: $3"
  [[ $1 == 0 ]] || failures=$((failures + 1))
  local word=${4:-}
  [[ -n $word ]] || word=$(sed -E 's/^hearth-proof( diff)?: ([A-Z]+).*/\2/' <<<"$3")
  [[ -v "cells[$2]" ]] || row_names+=("$2")
  cells[$2]+=" ${word:-?} |"
}
repeats_hold() {  # repeats_hold REPORT: no run failed and every repeat matched its first run
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if r["summary"]["error"] == 0 and all(
    c["holds"] for p in r["prompts"] for c in p["comparisons"] if c["kind"] == "repeat") else 1)
PY
}
run_dir() { [[ $1 == batched ]] && echo batched || echo "c$1"; }

for suite in $suites; do
  if [[ $suite == long ]]; then dir_model=$long_model served_name=$long_name; else dir_model=$short_model served_name=$short_name; fi
  for profile_set in $profiles; do
    base=$out/$suite/$profile_set
    profile_args=()
    for p in ${profile_set//+/ }; do profile_args+=(--profile "$profile_dir/$p.json"); done
    echo >>"$summary"
    echo "## $suite / $profile_set" >>"$summary"
    columns+=" $suite / $profile_set |"
    for mode in $modes; do
      for r in $runs; do
        if [[ $mode == single ]]; then model_args=(--model "$dir_model"); else model_args=(--server "$sockdir/hearth.sock" --model "$served_name"); fi
        if [[ $r == batched ]]; then way=(--batched); else way=(--concurrency "$r"); fi
        name=$mode-$(run_dir "$r")
        line=$("$bin/hearth-proof" run --suite "$suite" --budget "$budget" "${profile_args[@]}" \
          --repeat 2 "${way[@]}" --timeout "$timeout" "${model_args[@]}" --out "$base/$name" --quiet)
        status=$? word=""
        # Profiles run together differ by design (exit 1); what must hold is every repeat.
        if [[ $status == 1 && $profile_set == *+* ]] && repeats_hold "$base/$name/report.json"; then
          status=0 word=OK line+=" (the profiles differ by design; every repeat holds)"
        fi
        record $status "$name" "$line" "$word"
      done
    done
    # exact: the tokens (the guarantee); logprob:0: bit-identical logprobs too, which also
    # catches numeric drift that a degenerate (synthetic-model) token stream would hide.
    pairs=()
    if [[ " $modes " == *" single "* && " $modes " == *" served "* ]]; then
      for r in $runs; do pairs+=("single-$(run_dir "$r") served-$(run_dir "$r")"); done
    fi
    first=${runs%% *}
    for mode in $modes; do
      for r in ${runs#"$first"}; do pairs+=("$mode-$(run_dir "$first") $mode-$(run_dir "$r")"); done
    done
    for pair in "${pairs[@]}"; do
      set -- $pair
      for contract in exact logprob:0; do
        line=$("$bin/hearth-proof" diff "$base/$1" "$base/$2" --contract "$contract" --out "$base/diff-$1-vs-$2-${contract%%:*}")
        record $? "diff $1 vs $2 ($contract)" "$line"
      done
    done
  done
done

{
  echo
  echo "## Table"
  echo
  echo "| |$columns"
  echo "| --- |$(sed -E 's/[^|]+/ --- /g' <<<"$columns")"
  for name in "${row_names[@]}"; do echo "| $name |${cells[$name]}"; done
  echo
} >>"$summary"
if [[ $failures == 0 ]]; then
  echo "**All runs pass and every diff is SAME.**" >>"$summary"
else
  echo "**$failures run(s) or diff(s) did not pass; see the reports.**" >>"$summary"
fi
echo "run-mode-proofs: $failures failure(s); summary in $summary"
[[ $failures == 0 ]]
