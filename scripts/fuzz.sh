#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS (default 60) under ASan+UBSan on its seed corpus.
# Exits non-zero when any target crashed, leaked, hung or could not run: its crash input is kept
# under fuzz/crashes/<target>/ (or $KVCODEC_FUZZ_CRASHES/<target>/) to replay with
# `build/fuzz/.../<target>_fuzz <file>`.
#   scripts/fuzz.sh [SECONDS] [target...]
# KVCODEC_FUZZ_BUILD=DIR takes the targets from DIR, built by the caller, instead of building the
# fuzz preset first.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
build=${KVCODEC_FUZZ_BUILD:-build/fuzz}
[[ -n "${KVCODEC_FUZZ_BUILD:-}" ]] || scripts/setup.sh fuzz
targets=("$@")
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(find "$build" -name '*_fuzz' -type f -executable -printf '%f\n' | sed 's/_fuzz$//' | sort)
fi
failed=()
for t in "${targets[@]}"; do
  bin=$(find "$build" -name "${t}_fuzz" -type f -executable | head -1)
  if [[ -z "$bin" ]]; then
    echo "== $t: no fuzz target ${t}_fuzz in $build" >&2
    failed+=("$t")
    continue
  fi
  work=$(mktemp -d)
  crashes="${KVCODEC_FUZZ_CRASHES:-fuzz/crashes}/$t"
  mkdir -p "$crashes"
  [[ -d "fuzz/corpus/$t" ]] && cp -r "fuzz/corpus/$t/." "$work/"
  echo "== fuzzing $t for ${seconds}s"
  rc=0
  "$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$crashes/" "$work" >"$work.log" 2>&1 || rc=$?
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY|Done" "$work.log" || true
  if ((rc != 0)); then
    echo "== $t FAILED (exit $rc); the last lines of its log:" >&2
    tail -n 40 "$work.log" >&2
    failed+=("$t")
  else
    rmdir "$crashes" 2>/dev/null || true
  fi
  rm -rf "$work" "$work.log"
done
if ((${#failed[@]})); then
  echo "fuzz.sh: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: all ${#targets[@]} targets ran ${seconds}s without a failure"
