#!/usr/bin/env bash
# scripts/fuzz.sh must fail when a fuzz target crashes (it once ended its pipeline with
# `|| true`, so a crash exited 0) and pass when every target runs clean. The targets are real
# libFuzzer binaries built here with clang: one that traps on any non-empty input, one that
# never fails.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/crashy.cc" <<'CC'
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t size) {
  if (size > 0) __builtin_trap();
  return 0;
}
CC
cat >"$work/clean.cc" <<'CC'
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
CC
clang++ -fsanitize=fuzzer "$work/crashy.cc" -o "$work/crashy_fuzz"
clang++ -fsanitize=fuzzer "$work/clean.cc" -o "$work/clean_fuzz"

run() { KVCODEC_FUZZ_BUILD="$work" KVCODEC_FUZZ_CRASHES="$work/crashes" "$src/scripts/fuzz.sh" 2 "$@" >"$work/out" 2>&1; }

if ! run clean; then
  cat "$work/out"
  echo "FAIL: fuzz.sh failed on a target that never crashes" >&2
  exit 1
fi
if run clean crashy; then
  cat "$work/out"
  echo "FAIL: fuzz.sh exited 0 although a target crashed" >&2
  exit 1
fi
grep -q "1 of 2 targets failed: crashy" "$work/out" || { cat "$work/out"; echo "FAIL: the failed target is not named" >&2; exit 1; }
ls "$work/crashes/crashy/" | grep -q . || { echo "FAIL: the crash input was not kept" >&2; exit 1; }
if run missing; then
  echo "FAIL: fuzz.sh exited 0 for a target that does not exist" >&2
  exit 1
fi
echo "fuzz.sh: fails on a crash, passes clean targets, fails on a missing one"
