#!/usr/bin/env bash
# Builds the pinned llama.cpp (from the npm package node-llama-cpp, which carries the source
# as a git bundle) into a cache folder outside the clone, keyed by version and CPU, and
# prints the install prefix on stdout. Idempotent: a finished build is reused as is.
set -euo pipefail

NODE_LLAMA_CPP_VERSION="${NODE_LLAMA_CPP_VERSION:-3.21.1}"
CACHE_ROOT="${KVCODEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcodec}"
# The build uses -march=native, so a cache copied to another CPU must not be reused.
cpu_key=$( (uname -m; grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true) | sha256sum | cut -c1-12)
PREFIX="$CACHE_ROOT/llama.cpp-$NODE_LLAMA_CPP_VERSION-$cpu_key"
STAMP="$PREFIX/.complete"
# llama.cpp's per-architecture test program and the fixtures it writes: a stage of its own, so
# a cache made before it existed gains it without rebuilding what it has.
ARCHS_STAMP="$PREFIX/.archs-complete"
ARCHS_SEED=42

log() { echo "[setup-llama] $*" >&2; }

if [[ -f "$STAMP" && -f "$ARCHS_STAMP" ]]; then
  echo "$PREFIX"
  exit 0
fi

work="$PREFIX.work"
rm -rf "$work"
mkdir -p "$work"
log "fetching node-llama-cpp@$NODE_LLAMA_CPP_VERSION from the npm registry"
# shellcheck source=scripts/llama-source.sh
source "$(dirname "$0")/llama-source.sh"
clone_llama_source "$work" "$NODE_LLAMA_CPP_VERSION"

# test-llama-archs (tests/test-llama-archs.cpp) writes a small random-weight GGUF of every
# architecture llama.cpp's model saver supports: the compatibility matrix kvcodec is tested on.
make_archs_fixtures() {
  local bin="$1"
  local fixtures="$PREFIX/share/archs-fixtures"
  rm -rf "$fixtures"
  mkdir -p "$fixtures"
  log "writing the per-architecture fixtures (test-llama-archs -s $ARCHS_SEED)"
  "$bin" -s "$ARCHS_SEED" -o "$fixtures" >"$work/archs.log" 2>&1 || { tail -30 "$work/archs.log" >&2; exit 1; }
  local n
  n=$(find "$fixtures" -name '*.gguf' | wc -l)
  if [[ "$n" -lt 100 ]]; then
    echo "[setup-llama] test-llama-archs wrote only $n fixtures" >&2
    exit 1
  fi
  log "$n fixtures in $fixtures"
}

# OpenMP off: ggml's own thread pool is enough and keeps TSAN runs of kvcodec clean.
configure_llama() {
  cmake -S "$work/src" -B "$work/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH='$ORIGIN/../lib;$ORIGIN' \
    -DGGML_NATIVE=ON -DGGML_OPENMP=OFF \
    -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_COMMON=ON \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$work/configure.log" 2>&1 \
    || { tail -30 "$work/configure.log" >&2; exit 1; }
}

if [[ -f "$STAMP" ]]; then
  log "building llama.cpp's test-llama-archs for the cached build (~10 min on 2 cores)"
  configure_llama
  cmake --build "$work/build" -j"$(nproc)" --target test-llama-archs >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log" >&2; exit 1; }
  cp "$work/build/bin/test-llama-archs" "$PREFIX/bin/"
  make_archs_fixtures "$PREFIX/bin/test-llama-archs"
  rm -rf "$work"
  touch "$ARCHS_STAMP"
  echo "$PREFIX"
  exit 0
fi

log "building llama.cpp (libllama, libggml, llama-convert-llama2c-to-ggml, test-llama-archs); ~12 min on 2 cores"
configure_llama
cmake --build "$work/build" -j"$(nproc)" --target llama ggml llama-convert-llama2c-to-ggml test-llama-archs \
  >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; exit 1; }

# Lay out a small install tree by hand: `cmake --install` would want every target built.
rm -rf "$PREFIX"
mkdir -p "$PREFIX/include" "$PREFIX/lib" "$PREFIX/bin" "$PREFIX/share"
cp "$work/src/include/"*.h "$PREFIX/include/"
cp "$work/src/ggml/include/"*.h "$PREFIX/include/"
find "$work/build/bin" -maxdepth 1 -name '*.so*' -exec cp -P {} "$PREFIX/lib/" \;
cp "$work/build/bin/llama-convert-llama2c-to-ggml" "$work/build/bin/test-llama-archs" "$PREFIX/bin/"
# The GGUF converter's Python package, for tools that inspect models.
cp -r "$work/src/gguf-py" "$PREFIX/share/gguf-py"
if ldd "$PREFIX/lib/libllama.so" "$PREFIX/bin/llama-convert-llama2c-to-ggml" | grep -q "not found"; then
  echo "[setup-llama] built libraries do not resolve their dependencies" >&2
  exit 1
fi
(cd "$work/src" && git log -1 --format='%H') > "$PREFIX/COMMIT"
echo "$NODE_LLAMA_CPP_VERSION" > "$PREFIX/VERSION"
make_archs_fixtures "$PREFIX/bin/test-llama-archs"
rm -rf "$work"
touch "$STAMP" "$ARCHS_STAMP"
log "llama.cpp ready in $PREFIX"
echo "$PREFIX"
