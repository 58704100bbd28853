#!/usr/bin/env bash
# The whole test suite: set up and build, the source format check, then every test (unit and
# model) in the dev build, the unit tests and fuzz-corpus replays again under ASan+UBSan, and the
# concurrent parts (store backends, fetch pipeline, the server's scheduler) under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's start, with the seconds since the run began, so a slow CI run shows where.
phase() { echo "== $* (at ${SECONDS} s)"; }
phase "setup: packages, llama.cpp, the dev build and the ASan+UBSan unit tests' build"
# The ASan+UBSan pass runs the unit tests only: its build is their executables alone.
scripts/setup.sh dev asan-ubsan:unit_tests
phase "format"
scripts/check_format.sh
phase "release: configures (the preset the demo and the results build, without tests)"
cmake --preset release -DKVCODEC_LLAMA_ROOT="$(scripts/setup-llama.sh)" >/dev/null
scripts/setup-test-tools.sh  # promtool and the OpenAI SDK, for tests/serve
phase "dev: all tests"
ctest --preset dev -j2 --timeout 900
phase "asan-ubsan: unit tests and fuzz replays"
ctest --preset asan-ubsan -j2 -L unit --timeout 900
phase "tsan: store, fetch and the server"
# The threaded parts. llama.cpp is not built with TSan: the server tests run with suppressions
# for reports inside its libraries only (scripts/tsan.supp).
KVCODEC_LLAMA_ROOT="$(scripts/setup-llama.sh)"  # cached: prints the install prefix
if [[ ! -f build/tsan/CMakeCache.txt ]]; then
  cmake --preset tsan -DKVCODEC_LLAMA_ROOT="$KVCODEC_LLAMA_ROOT" >/dev/null
fi
# Longest first, so the pair running at the end is short.
tsan_tests=(serve/completion_server_test fetch/fetch_test serve/server_redis_test store/store_test store/redis_store_test
            fetch/decoded_chunk_cache_test fetch/read_buffers_test fetch/prefill_cost_test)
cmake --build build/tsan -j"$(nproc)" --target "${tsan_tests[@]##*/}"
# Two at a time (each runs its tests one after another; the Redis ones wait on servers), each
# one's output shown whole when it fails and as its summary when it passes.
tsan_run() {
  local log rc=0
  log=$(mktemp)
  KVCODEC_THREADS=1 TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/scripts/tsan.supp" "$1" --gtest_brief=1 >"$log" 2>&1 || rc=$?
  if ((rc == 0)); then
    echo "tsan: $1: $(grep -E '^\[  PASSED  \]' "$log")"
  else
    cat "$log"
    echo "tsan: $1 FAILED (exit $rc)"
  fi
  rm -f "$log"
  return $((rc != 0))
}
export -f tsan_run
printf 'build/tsan/src/%s\n' "${tsan_tests[@]}" | xargs -P 2 -I{} bash -c 'tsan_run "$1"' _ {}
phase "done"
