#!/usr/bin/env bash
# Fails, naming the files, when a tracked C/C++ file differs from what clang-format-14 (Debian
# 12's, installed by scripts/setup.sh) makes of it under the repo's .clang-format. One pinned
# version: another clang-format may format the same file differently.
#   scripts/check_format.sh          check (scripts/test.sh runs this)
#   scripts/check_format.sh --fix    rewrite the files in place
set -euo pipefail
cd "$(dirname "$0")/.."
format=clang-format-14
command -v "$format" >/dev/null || { echo "check_format: $format not found (scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.c' '*.cc' '*.h' '*.hpp')
if [[ ${1:-} == --fix ]]; then
  "$format" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$format" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check_format: ${#bad[@]} file(s) differ from $format's output (fix: scripts/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted" >&2
