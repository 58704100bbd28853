#!/usr/bin/env bash
# Makes the self-contained GPU check bundle (issue 41): OUT_DIR/run.sh and OUT_DIR/payload.tar.gz,
# plus OUT_DIR.tar.gz of the folder. The payload holds the kvcodec CLI (release build), the NVDEC
# test program libav_test, every shared library they load but glibc's own and libcuda (copied into
# bin/lib, RUNPATH $ORIGIN/lib on the programs and $ORIGIN on the libraries), the kvtiny model and
# check.sh. It runs on any x86-64 Linux with glibc >= 2.36 and AVX2; nothing else from the machine.
#  - llama.cpp's libraries come from a portable build (scripts/gpu_bundle/portable-llama.sh:
#    AVX2, not -march=native), swapped in by soname: kvcodec needs no rebuild for it.
#  - libavcodec and OpenBLAS load ~80 libraries (200 MB) the check never calls (AV1, JPEG XL,
#    SVG, X11, ...): they are replaced by stubs with the same symbols (gpu_bundle/make_stub.sh)
#    that exit 70 with the library's name if ever called. KEEP below lists what runs for real.
#  - The payload is gzip'd: the model and libx265/libavcodec alone are 50 MB, the carry limit 64 MiB.
# Usage: scripts/gpu_bundle.sh OUT_DIR   (e.g. build/gpu-bundle/bundle)
# Env: LLAMA_PREFIX (llama.cpp libraries to bundle; ALLOW_NATIVE=1 lets a -march=native one in),
#      CLI_BUILD (default build/release), TEST_BUILD (default build/dev: the release preset builds
#      no tests; dev is optimised too), MODEL (default models/kvtiny/kvtiny.gguf), BUNDLE_MODEL=0
#      leaves the model out (18 MB of the 35: run.sh then reads $MODEL or the checkout's
#      models/kvtiny, for a checkout that travels with its models: not the one that
#      scripts/gpu_device_tree.sh makes, which leaves the GGUF files behind).
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:?usage: scripts/gpu_bundle.sh OUT_DIR}
cli_build=${CLI_BUILD:-build/release}
test_build=${TEST_BUILD:-build/dev}
model=${MODEL:-models/kvtiny/kvtiny.gguf}
log() { echo "[gpu_bundle] $*" >&2; }
for tool in patchelf readelf strip gcc; do
  command -v "$tool" >/dev/null || { echo "gpu_bundle: $tool missing (scripts/setup.sh installs it)" >&2; exit 1; }
done

cli=$cli_build/tools/kvcodec/kvcodec
test_bin=$test_build/src/libav/libav_test
llama_native="$(scripts/setup-llama.sh)"
export KVCODEC_LLAMA_ROOT=$llama_native
# Built every time (incremental): a bundle of an older build would check older code.
[[ -f $cli_build/CMakeCache.txt ]] || cmake --preset release >/dev/null
log "building kvcodec_cli in $cli_build"
cmake --build "$cli_build" -j"$(nproc)" --target kvcodec_cli >/dev/null
[[ -f $test_build/CMakeCache.txt ]] || cmake --preset dev >/dev/null
log "building libav_test in $test_build"
cmake --build "$test_build" -j"$(nproc)" --target libav_test >/dev/null
llama_portable=${LLAMA_PREFIX:-$(scripts/gpu_bundle/portable-llama.sh)}

# What runs for real; every other library in the closure becomes a stub. The C library's own
# libraries stay the machine's, and libcuda.so.1 is the driver's (dlopen'ed, never linked).
KEEP='^(libstdc\+\+\.so\.6|libgcc_s\.so\.1|libavcodec\.so\..*|libavutil\.so\..*|libswresample\.so\..*|libx265\.so\..*|libx264\.so\..*|libnuma\.so\.1|libz\.so\.1|liblzma\.so\.5|libzstd\.so\.1|libdeflate\.so\.0|libxxhash\.so\.0|libhiredis\.so\..*|libcrypto\.so\.3|libssl\.so\.3|libcpp-httplib\.so\..*|libbrotli(dec|enc|common)\.so\.1|libllama\.so\.0|libggml(-base|-cpu)?\.so\.0)$'
# Stubs whose functions return 0 rather than exit (see make_stub.sh).
ZERO='^(libaom\.so\.3|libvpx\.so\.7)$'
GLIBC='^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|ld-linux-x86-64\.so\.2|libcuda\.so\.1)$'

stage=$(mktemp -d "${TMPDIR:-/tmp}/kvcodec-gpu-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin/lib" "$stage/model"
install -m 755 "$cli" "$stage/bin/kvcodec"
install -m 755 "$test_bin" "$stage/bin/libav_test"
strip --strip-unneeded "$stage/bin/kvcodec" "$stage/bin/libav_test"
patchelf --set-rpath '$ORIGIN/lib' "$stage/bin/kvcodec"
patchelf --set-rpath '$ORIGIN/lib' "$stage/bin/libav_test"

# soname -> path as the loader finds it here, the portable llama.cpp first.
declare -A where
while read -r name path; do
  [[ $path == /* ]] && where[$name]=$(readlink -f "$path")
done < <(LD_LIBRARY_PATH=$llama_portable/lib ldd "$cli" "$test_bin" | awk '$2 == "=>" {print $1, $3}')

queue=()
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
mapfile -t queue < <(needed "$cli"; needed "$test_bin")
declare -A done_
n_real=0
n_stub=0
while ((${#queue[@]})); do
  name=${queue[0]}
  queue=("${queue[@]:1}")
  [[ -n ${done_[$name]:-} || $name =~ $GLIBC ]] && continue
  done_[$name]=1
  src=${where[$name]:-}
  [[ -n $src ]] || { echo "gpu_bundle: $name does not resolve here" >&2; exit 1; }
  if [[ $name =~ $KEEP ]]; then
    cp "$src" "$stage/bin/lib/$name"
    chmod u+w "$stage/bin/lib/$name"
    strip --strip-unneeded "$stage/bin/lib/$name"
    patchelf --set-rpath '$ORIGIN' "$stage/bin/lib/$name"
    mapfile -t -O "${#queue[@]}" queue < <(needed "$src")
    n_real=$((n_real + 1))
  else
    scripts/gpu_bundle/make_stub.sh "$src" "$stage/bin/lib" "$([[ $name =~ $ZERO ]] && echo zero || echo exit)"
    n_stub=$((n_stub + 1))
  fi
done
log "$n_real libraries copied, $n_stub stubbed"

# Nothing may resolve outside the bundle but glibc (and libcuda, which is not linked).
outside=$(env -u LD_LIBRARY_PATH ldd "$stage/bin/kvcodec" "$stage/bin/libav_test" "$stage"/bin/lib/*.so* |
  awk -v stage="$stage" '$2 == "=>" && $3 !~ "^" stage {print $1}' | sort -u | grep -Ev "$GLIBC" || true)
if [[ -n $outside ]]; then
  echo "gpu_bundle: resolved outside the bundle: $outside" >&2
  exit 1
fi

# No AVX-512 in llama.cpp's libraries, which do not check the CPU (kvcodec's AVX-512 kernels and
# Debian's libraries choose theirs at run time).
for f in "$stage"/bin/lib/lib{llama,ggml,ggml-base,ggml-cpu}.so.0; do
  if objdump -d --no-show-raw-insn "$f" | grep -q '%zmm'; then
    echo "gpu_bundle: $(basename "$f") uses AVX-512: not portable (LLAMA_PREFIX: a native llama.cpp?)" >&2
    [[ -n ${ALLOW_NATIVE:-} ]] || exit 1
  fi
done

if [[ ${BUNDLE_MODEL:-1} != 0 ]]; then
  cp "$model" "$stage/model/kvtiny.gguf"
  eval_text=$(dirname "$model")/eval.txt
  [[ -f $eval_text ]] && cp "$eval_text" "$stage/model/eval.txt"
fi
cp scripts/gpu_bundle/check.sh "$stage/check.sh"
echo "kvcodec $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo +dirty), llama.cpp $(cut -c1-12 "$llama_portable/COMMIT") ($(basename "$llama_portable")), made $(date -u +%Y-%m-%dT%H:%MZ)" \
  >"$stage/BUNDLE_INFO"

rm -rf "$out_dir"
mkdir -p "$out_dir"
tar -czf "$out_dir/payload.tar.gz" -C "$stage" .
cp scripts/gpu_bundle/run.sh "$out_dir/run.sh"
tar -czf "$out_dir.tar.gz" -C "$(dirname "$out_dir")" "$(basename "$out_dir")"
# The ldd report of the unpacked tree, for the record.
(cd "$stage" && ldd bin/kvcodec bin/libav_test) 2>&1 | sed "s|$stage|<bundle>|g" >"$out_dir.ldd.txt" || true
log "unpacked: $(du -sh --apparent-size "$stage" | cut -f1); folder $out_dir: $(du -sb "$out_dir" | awk '{printf "%.1f MiB", $1 / 1048576}'); tarball $out_dir.tar.gz: $(stat -c%s "$out_dir.tar.gz" | awk '{printf "%.1f MiB", $1 / 1048576}')"
