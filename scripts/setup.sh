#!/usr/bin/env bash
# Installs what kvcodec needs on Debian 12 and builds it. Idempotent and quick when nothing
# changed: apt runs only for missing packages, llama.cpp is cached outside the clone
# (scripts/setup-llama.sh), and the build is incremental.
#   scripts/setup.sh [preset[:target]...]    (default preset: dev; target: build only that one,
#                                             e.g. asan-ubsan:unit_tests)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates xxd
  clang libclang-rt-14-dev clang-format-14
  libcli11-dev nlohmann-json3-dev libxxhash-dev libgtest-dev libgmock-dev libbenchmark-dev
  libdeflate-dev libopenblas-dev liblapacke-dev
  libavcodec-dev libavutil-dev libffmpeg-nvenc-dev libzstd-dev
  libhiredis-dev redis-server libcpp-httplib-dev libssl-dev curl
  pybind11-dev python3-dev python3-numpy python3-pytest python3-hypothesis python3-torch python3-pip python3-setuptools
  python3-wheel python3-venv
  patchelf debootstrap
)

log() { echo "[setup] $* (at ${SECONDS} s)" >&2; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches llama.cpp's pinned source; a machine may already have Node.js from elsewhere,
# and Debian's npm package would conflict with it.
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

KVCODEC_LLAMA_ROOT="$(scripts/setup-llama.sh)"
export KVCODEC_LLAMA_ROOT

presets=("$@")
((${#presets[@]})) || presets=(dev)
for spec in "${presets[@]}"; do
  preset=${spec%%:*}
  target=()
  [[ $spec == *:* ]] && target=(--target "${spec#*:}")
  if [[ ! -f "build/$preset/CMakeCache.txt" ]] || ! grep -q "KVCODEC_LLAMA_ROOT:PATH=$KVCODEC_LLAMA_ROOT\$" "build/$preset/CMakeCache.txt"; then
    log "configuring preset $preset"
    cmake --preset "$preset" -DKVCODEC_LLAMA_ROOT="$KVCODEC_LLAMA_ROOT" >/dev/null
  fi
  log "building preset $preset${target[1]:+ (target ${target[1]})}"
  cmake --build --preset "$preset" -j"$(nproc)" "${target[@]}"
done
