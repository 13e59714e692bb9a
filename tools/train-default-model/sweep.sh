#!/usr/bin/env bash
# Trains the candidate configurations side by side on one GPU (a model this small leaves
# most of an H100 idle), then keeps the one with the lowest valid loss.
# Usage (repository root, corpus from the gather step): sweep.sh RUNS_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=${1:?usage: sweep.sh RUNS_DIR}
corpus=${CORPUS:-.traindata/corpus.jsonl}
mkdir -p "$runs"
# tag and its arguments; every run has seed 1234, batch 64 x 512, vocab 4096, GQA 2 kv heads.
# (An earlier set without dropout and with 1,500-3,000 steps overfit after ~8 epochs; see
# README.md beside this file.)
configs=(
  "h256-l8-d0.0-s600   --hidden 256 --heads 4 --intermediate 704 --layers 8  --dropout 0.0 --steps 600"
  "h256-l8-d0.1-s1000  --hidden 256 --heads 4 --intermediate 704 --layers 8  --dropout 0.1 --steps 1000"
  "h256-l8-d0.1-s1500  --hidden 256 --heads 4 --intermediate 704 --layers 8  --dropout 0.1 --steps 1500"
  "h256-l8-d0.2-s1500  --hidden 256 --heads 4 --intermediate 704 --layers 8  --dropout 0.2 --steps 1500"
  "h256-l10-d0.1-s1200 --hidden 256 --heads 4 --intermediate 704 --layers 10 --dropout 0.1 --steps 1200"
  "h256-l10-d0.2-s1500 --hidden 256 --heads 4 --intermediate 704 --layers 10 --dropout 0.2 --steps 1500"
)
pids=()
for c in "${configs[@]}"; do
  read -r tag args <<<"$c"
  # shellcheck disable=SC2086
  python3 "$here/train_default_model.py" train --corpus "$corpus" --out "$runs/$tag" \
    --eval-every 100 --time-limit "${TIME_LIMIT:-480}" $args >"$runs/$tag.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
python3 "$here/train_default_model.py" select --runs "$runs"
exit $status
