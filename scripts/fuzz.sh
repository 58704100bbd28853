#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS (default 60) under ASan+UBSan on its seed corpus.
#   scripts/fuzz.sh [SECONDS] [target...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
scripts/setup.sh asan-ubsan
targets=("$@")
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(find build/asan-ubsan -name '*_fuzz' -type f -executable -printf '%f\n' | sed 's/_fuzz$//' | sort)
fi
for t in "${targets[@]}"; do
  bin=$(find build/asan-ubsan -name "${t}_fuzz" -type f -executable | head -1)
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$t/." "$work/"
  echo "== fuzzing $t for ${seconds}s"
  "$bin" -max_total_time="$seconds" -print_final_stats=1 "$work" 2>&1 | grep -E "stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY|Done" || true
  rm -rf "$work"
done
