#!/usr/bin/env bash
# Builds llama.cpp's own llama-server from the same pinned source as scripts/setup-llama.sh
# (node-llama-cpp's git bundle), so a benchmark against it (scripts/bench_llama_server.py)
# compares kvcodec serve with the very llama.cpp it embeds. Installs it as
# $PREFIX/bin/llama-server, where $PREFIX is setup-llama.sh's cache prefix, and prints the
# binary's path on stdout; logs go to stderr. Idempotent: a finished build is reused as is.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "[setup-llama-server] $*" >&2; }

# setup-llama.sh owns the version pin, the cache root and the CPU key; asking it for the
# prefix (building the libraries first if they are missing) keeps the two keyed alike.
PREFIX="$("$here/setup-llama.sh")"
NODE_LLAMA_CPP_VERSION="$(cat "$PREFIX/VERSION")"
STAMP="$PREFIX/.server-complete"
BIN="$PREFIX/bin/llama-server"

if [[ -f "$STAMP" && -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

# Two set-ups started at once would share the work dir: the second waits for the first and
# then finds its stamp.
exec 9>"$PREFIX.server-lock"
flock 9
if [[ -f "$STAMP" && -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

work="$PREFIX.server-work"
rm -rf "$work"
mkdir -p "$work"
log "fetching node-llama-cpp@$NODE_LLAMA_CPP_VERSION from the npm registry"
# shellcheck source=scripts/llama-source.sh
source "$here/llama-source.sh"
clone_llama_source "$work" "$NODE_LLAMA_CPP_VERSION"
commit="$(cd "$work/src" && git log -1 --format='%H')"
if [[ -f "$PREFIX/COMMIT" && "$commit" != "$(cat "$PREFIX/COMMIT")" ]]; then
  log "the bundle's commit $commit differs from the cached libraries' $(cat "$PREFIX/COMMIT")"
  exit 1
fi

# Static (BUILD_SHARED_LIBS=OFF): the server then carries its own libllama/libggml/common and
# needs nothing from $PREFIX/lib. Sharing those libraries instead would tie it to setup-llama.sh's
# exact configuration (its libllama-common is built without the server's needs in mind) and a
# later rebuild of either could break the other; a self-contained binary cannot drift that way.
# Everything that shapes the kernels (Release, GGML_NATIVE, no OpenMP: ggml's own thread pool)
# matches setup-llama.sh, so both servers run the same matrix code. No OpenSSL or curl: the
# server is only reached over loopback and never downloads models; cpp-httplib is vendored.
log "configuring llama-server (static, native)"
cmake -S "$work/src" -B "$work/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=ON -DGGML_OPENMP=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_COMMON=ON \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$work/configure.log" 2>&1 \
  || { tail -30 "$work/configure.log" >&2; log "configure failed; log kept in $work"; exit 1; }

# Niced: the compile may share a small machine with the project's own builds.
log "building llama-server (~10 min on 2 cores)"
nice cmake --build "$work/build" -j"$(nproc)" --target llama-server \
  >"$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log" >&2; log "build failed; log kept in $work"; exit 1; }

mkdir -p "$PREFIX/bin"
cp "$work/build/bin/llama-server" "$BIN.tmp"
mv -f "$BIN.tmp" "$BIN"
if ldd "$BIN" | grep -q "not found"; then
  ldd "$BIN" >&2
  log "llama-server does not resolve its libraries"
  exit 1
fi
"$BIN" --version >&2 2>&1 || true
rm -rf "$work"
touch "$STAMP"
log "llama-server ready: $BIN"
echo "$BIN"
