#!/usr/bin/env bash
# Fails, naming the files, when a tracked C/C++ file differs from what clang-format-14 (Debian
# 12's, installed by scripts/setup.sh) makes of it under the repo's .clang-format. One pinned
# version: another clang-format may format the same file differently.
#   scripts/check_format.sh [FILE...]          check (scripts/test.sh runs this on every file)
#   scripts/check_format.sh --fix [FILE...]    rewrite them in place
# Without FILEs: every tracked C/C++ file.
set -euo pipefail
cd "$(dirname "$0")/.."
format=clang-format-14
command -v "$format" >/dev/null || { echo "check_format: $format not found (scripts/setup.sh installs it)" >&2; exit 2; }
fix=0
if [[ ${1:-} == --fix ]]; then
  fix=1
  shift
fi
files=("$@")
((${#files[@]})) || mapfile -t files < <(git ls-files '*.c' '*.cc' '*.h' '*.hpp')
if ((fix)); then
  "$format" -i "${files[@]}"
  exit 0
fi
# Batches of files, as many at once as there are cores; a file that differs is named in a
# -Wclang-format-violations warning. A batch that fails for another reason (a file clang-format
# cannot read) fails the check.
report=$(mktemp)
trap 'rm -f "$report"' EXIT
if ! printf '%s\0' "${files[@]}" | xargs -0 -r -n 24 -P "$(nproc)" "$format" --dry-run >/dev/null 2>"$report"; then
  cat "$report" >&2
  echo "check_format: $format failed" >&2
  exit 2
fi
mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' "$report" | sort -u)
if ((${#bad[@]})); then
  echo "check_format: ${#bad[@]} file(s) differ from $format's output (fix: scripts/check_format.sh --fix FILE...):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted" >&2
