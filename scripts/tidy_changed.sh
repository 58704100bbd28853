#!/usr/bin/env bash
# clang-tidy-14 (checks: .clang-tidy) over the C/C++ lines changed since BASE (committed or not),
# with the dev build's compile commands: findings on lines you did not touch are not shown.
# Prints each finding; exits 1 if there is any.
#   scripts/tidy_changed.sh [BASE]     (default BASE: origin/main if it exists, else HEAD~1)
# Needs Debian's clang-tidy-14 (apt-get install clang-tidy-14) and a configured dev build
# (scripts/setup.sh dev).
set -euo pipefail
cd "$(dirname "$0")/.."
diff_tool=/usr/bin/clang-tidy-diff-14.py
[[ -x $diff_tool ]] || { echo "tidy_changed: $diff_tool not found: apt-get install clang-tidy-14" >&2; exit 2; }
[[ -f build/dev/compile_commands.json ]] || { echo "tidy_changed: no build/dev: run scripts/setup.sh dev" >&2; exit 2; }
base=${1:-$(git rev-parse --verify -q origin/main || git rev-parse HEAD~1)}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Headers are checked through the sources that include them (HeaderFilterRegex); GCC-only
# flags in the compile commands are not errors for clang.
git diff -U0 "$base" -- '*.c' '*.cc' '*.h' '*.hpp' |
  /usr/bin/python3 "$diff_tool" -p1 -path build/dev -quiet -j "$(nproc)" -clang-tidy-binary clang-tidy-14 \
    -extra-arg=-Wno-unknown-warning-option 2>/dev/null | tee "$log" || true
findings=$(grep -cE ': (warning|error):' "$log" || true)
if ((findings > 0)); then
  echo "tidy_changed: $findings finding(s) on lines changed since $base" >&2
  exit 1
fi
echo "tidy_changed: no findings on lines changed since $base" >&2
