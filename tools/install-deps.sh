#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages hearth builds against, only where missing.
# CUDA is optional: with nvcc at /usr/local/cuda the CUDA backend is compiled too.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config git clang-format
          libuv1-dev nlohmann-json3-dev libgtest-dev libgmock-dev
          libpcre2-dev libutf8proc-dev libxxhash-dev libcli11-dev
          libcpp-httplib-dev prometheus-cpp-dev  # httplib: its client, for tests and the bench
          python3-jsonschema)  # validates structured outputs (tests/tools)
# Node runs the official openai client against the gateway in the tests; any node >= 18 will do.
command -v node >/dev/null 2>&1 || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
