#!/usr/bin/env bash
# Installs the build into a temporary prefix and uses it as a user would: a C program through
# pkg-config and a CMake project through find_package(kvcodec), each run on the test model. The
# prefix is then moved, and both run again from the new place (the install is relocatable).
# It also checks the shipped library exports the C API alone.
#   run_install_test.sh BUILD_DIR MODEL WORK_DIR
set -euo pipefail
build=$1 model=$2 work=$3
here="$(cd "$(dirname "$0")" && pwd)"
fail() { echo "install test: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log" >&2; fail "cmake --install failed"; }

lib=$(find "$prefix" -name 'libkvcodec.so.*.*.*' -type f | head -1)
[[ -n "$lib" ]] || fail "no versioned libkvcodec.so in $prefix"
rel_libdir=$(dirname "${lib#"$prefix"/}")
# While the major version is 0 the SONAME carries major.minor (a 0.x minor may break the ABI).
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
version=$(basename "$lib" | sed 's/^libkvcodec\.so\.//')
if [[ "$version" == 0.* ]]; then want="libkvcodec.so.${version%.*}"; else want="libkvcodec.so.${version%%.*}"; fi
[[ "$soname" == "$want" ]] || fail "SONAME is '$soname', expected $want"
echo "soname: $soname"
exported=$(nm -D --defined-only "$lib" | awk '{print $3}')
others=$(grep -v '^kvc_' <<<"$exported" || true)
[[ -z "$others" ]] || fail "libkvcodec exports more than kvc_*: $(head -5 <<<"$others" | tr '\n' ' ')"
echo "exports: $(wc -l <<<"$exported") symbols, all kvc_*"
runpath=$(readelf -d "$lib" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
IFS=: read -ra entries <<<"$runpath"
for e in "${entries[@]}"; do
  [[ "$e" == '$ORIGIN'* ]] || fail "RUNPATH has $e: only \$ORIGIN-relative folders keep the install relocatable"
done
echo "runpath: ${runpath:-none}"
for f in include/kvcodec/kvcodec.h include/kvcodec/kvcodec.hpp; do [[ -f "$prefix/$f" ]] || fail "$f not installed"; done

build_consumers() {  # $1: prefix, $2: output folder
  local p=$1 out=$2
  mkdir -p "$out"
  # shellcheck disable=SC2046  # pkg-config's flags are meant to split
  cc -std=c11 -Wall -Wextra -Wpedantic -Werror -o "$out/consumer_c" "$here/consumer.c" \
    $(PKG_CONFIG_PATH="$p/$rel_libdir/pkgconfig" pkg-config --cflags --libs kvcodec) -Wl,-rpath,"$p/$rel_libdir" -lm
  cmake -S "$here/cmake_consumer" -B "$out/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$p" -DCMAKE_BUILD_TYPE=Release \
    >"$out/cmake.log" 2>&1 || { cat "$out/cmake.log" >&2; fail "the CMake project did not configure"; }
  cmake --build "$out/cmake" >>"$out/cmake.log" 2>&1 || { cat "$out/cmake.log" >&2; fail "the CMake project did not build"; }
}
run_consumers() {  # $1: output folder
  "$1/consumer_c" "$model" raw - || fail "the C program failed (raw)"
  "$1/consumer_c" "$model" quant 8 || fail "the C program failed (quant 8)"
  "$1/cmake/consumer" "$model" raw - || fail "the CMake project's program failed"
}
run_cli() {  # $1: prefix; the installed command line finds its library through its own RUNPATH
  "$1/bin/kvcodec" codecs >"$work/codecs.txt" || fail "the installed kvcodec command failed"
  grep -q '^kvtc ' "$work/codecs.txt" || fail "the installed kvcodec command listed no kvtc"
}

build_consumers "$prefix" "$work/first"
run_consumers "$work/first"
run_cli "$prefix"

# Relocated: the same files from another folder, found through their own paths alone.
mv "$prefix" "$work/moved"
build_consumers "$work/moved" "$work/second"
run_consumers "$work/second"
run_cli "$work/moved"
echo "install test: ok"
