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
configs=(
  "h256-l8-s1500  --hidden 256 --heads 4 --intermediate 704  --layers 8  --steps 1500"
  "h256-l8-s3000  --hidden 256 --heads 4 --intermediate 704  --layers 8  --steps 3000"
  "h256-l10-s2000 --hidden 256 --heads 4 --intermediate 704  --layers 10 --steps 2000"
  "h384-l5-s2000  --hidden 384 --heads 6 --intermediate 1024 --layers 5  --steps 2000"
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
