#!/usr/bin/env bash
# Builds hearth and runs the whole test suite: the release build (with the CUDA backend when
# nvcc exists; GPU tests skip without a device) runs every test once, then an ASan+UBSan build
# runs what sanitizers find: the unit and fuzz tests and a few short multi-process cases
# (labels in cmake/Testing.cmake). Usage: tools/run-tests.sh [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
jobs=$(nproc)
# Warnings are errors in CI (.ci/run sets HEARTH_WERROR=ON), not on a user's newer compiler.
werror=${HEARTH_WERROR:-OFF}

# The official openai npm client, pinned by tests/gateway/node/package-lock.json; without it the
# client test skips (and says so).
if command -v npm >/dev/null 2>&1; then
  (cd tests/gateway/node && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "warning: could not install the openai npm client; its gateway test will skip"
fi

echo "== format check (.clang-format) =="
unformatted=$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | while read -r f; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || echo "$f"; done)
if [ -n "$unformatted" ]; then
  echo "not formatted (run clang-format -i on them):"; echo "$unformatted"; exit 1
fi

# Release without debug info: -g nearly doubles the compile time of this template-heavy code,
# and a failing test says what failed without a debugger. -O2, not Release's -O3: the level whose
# warnings -Werror has been held to. (The quick start builds the same, in the same folder.)
echo "== release build =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DHEARTH_WERROR="$werror" >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" "$@"

# -O1 -g1: several times faster than -O0 under ASan, with the line tables its reports need.
echo "== sanitizer build (ASan + UBSan, CPU paths) =="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
  -DHEARTH_SANITIZE=ON -DHEARTH_CUDA=OFF -DHEARTH_WERROR="$werror" >/dev/null
cmake --build build-asan -j"$jobs" --target sanitizer_tests
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L "^(unit|fuzz|sanitize)$" -LE "^gpu$" "$@"
echo "== all tests passed =="
