#!/usr/bin/env bash
# Builds the pinned llama.cpp's libraries (libllama, libggml*) for a portable x86-64 target
# (AVX2/FMA/F16C, the level every GPU host of the last decade has) into a cache folder outside
# the clone, and prints its prefix. setup-llama.sh builds with -march=native (here: AVX-512),
# which could stop the bundle with SIGILL on another CPU. kvcodec links these libraries by
# soname only, so the bundle swaps them in at copy time without rebuilding the project.
set -euo pipefail
NODE_LLAMA_CPP_VERSION="${NODE_LLAMA_CPP_VERSION:-3.21.1}"
CACHE_ROOT="${KVCODEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcodec}"
PREFIX="$CACHE_ROOT/llama.cpp-$NODE_LLAMA_CPP_VERSION-portable-x86-64-v3"
if [[ -f "$PREFIX/.complete" ]]; then
  echo "$PREFIX"
  exit 0
fi
log() { echo "[portable-llama] $*" >&2; }
work="$PREFIX.work"
rm -rf "$work"
mkdir -p "$work"
log "fetching node-llama-cpp@$NODE_LLAMA_CPP_VERSION from the npm registry"
# shellcheck source=scripts/llama-source.sh
source "$(dirname "$0")/../llama-source.sh"
clone_llama_source "$work" "$NODE_LLAMA_CPP_VERSION"
log "building libllama and libggml (GGML_NATIVE=OFF, AVX2); ~10 min on 2 cores"
cmake -S "$work/src" -B "$work/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH='$ORIGIN' \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
  -DGGML_AVX512=OFF -DGGML_OPENMP=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_COMMON=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$work/configure.log" 2>&1 \
  || { tail -30 "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" -j"$(nproc)" --target llama ggml >"$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log" >&2; exit 1; }
rm -rf "$PREFIX"
mkdir -p "$PREFIX/lib"
find "$work/build/bin" -maxdepth 1 -name '*.so*' -exec cp -P {} "$PREFIX/lib/" \;
(cd "$work/src" && git log -1 --format='%H') > "$PREFIX/COMMIT"
rm -rf "$work"
touch "$PREFIX/.complete"
log "ready in $PREFIX"
echo "$PREFIX"
