#!/usr/bin/env bash
# Installs the build into a temporary prefix and uses it as a user would: a C program through
# pkg-config and a CMake project through find_package(kvcodec), each run on the test model. The
# prefix is then moved, and both run again from the new place (the install is relocatable).
# It also checks the shipped library exports the C API alone, that nothing installed names the
# source or build tree, and that the installed command takes its model from --model or
# $KVCODEC_MODEL alone.
#   run_install_test.sh BUILD_DIR MODEL WORK_DIR
set -euo pipefail
build=$1 model=$2 work=$3
here="$(cd "$(dirname "$0")" && pwd)"
source_dir="$(cd "$here/../.." && pwd)"
build_dir="$(cd "$build" && pwd)"
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

# No installed file names the tree it was built from (a default model path, a data folder, a
# RUNPATH): the install must work once that tree is gone. Debug information names its sources,
# as it should, so binaries are read without it.
baked=0
while IFS= read -r -d '' f; do
  text="$f"
  if [[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" == '177ELF' ]]; then
    text="$work/stripped"
    objcopy --strip-debug "$f" "$text" || fail "objcopy could not read $f"
  fi
  strings -a "$text" >"$work/strings.txt"  # whole, not piped into grep -q (pipefail would hide a match)
  for tree in "$source_dir" "$build_dir"; do
    if grep -F "$tree" "$work/strings.txt" >"$work/baked.txt"; then
      echo "install test: ${f#"$prefix"/} names $tree: $(head -3 "$work/baked.txt" | tr '\n' ' ')" >&2
      baked=1
    fi
  done
done < <(find "$prefix" -type f -print0)
rm -f "$work/stripped" "$work/strings.txt" "$work/baked.txt"
[[ $baked == 0 ]] || fail "installed files name the source or build tree"
echo "no installed file names $source_dir or $build_dir"

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
  "$1/consumer_c" "$model" planes - || fail "the C program failed (planes)"
  "$1/consumer_c" "$model" quant 8 || fail "the C program failed (quant 8)"
  "$1/cmake/consumer" "$model" raw - || fail "the CMake project's program failed"
}
run_cli() {  # $1: prefix; the installed command line finds its library through its own RUNPATH
  "$1/bin/kvcodec" codecs >"$work/codecs.txt" || fail "the installed kvcodec command failed"
  grep -q '^kvtc ' "$work/codecs.txt" || fail "the installed kvcodec command listed no kvtc"
  # Outside a checkout, without --model or $KVCODEC_MODEL, there is no model: one clear line.
  echo "Call me Ishmael." >"$work/prompt.txt"
  if (cd "$work" && env -u KVCODEC_MODEL "$1/bin/kvcodec" eval --docs 1 >"$work/no_model.out" 2>&1); then
    fail "the installed kvcodec evaluated without a model"
  fi
  grep -q 'no model given: pass --model FILE or set KVCODEC_MODEL' "$work/no_model.out" ||
    fail "kvcodec without a model: unexpected message: $(cat "$work/no_model.out")"
  (cd "$work" && KVCODEC_MODEL="$model" "$1/bin/kvcodec" tokenize prompt.txt >"$work/tokens.txt") ||
    fail "the installed kvcodec did not take its model from KVCODEC_MODEL"
  [[ -s "$work/tokens.txt" ]] || fail "kvcodec tokenize printed no tokens"
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
