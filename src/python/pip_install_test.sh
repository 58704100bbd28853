#!/usr/bin/env bash
# `pip install ./python` as a user runs it, offline (--no-index), into a temporary folder, reusing
# this build's extension (KVCODEC_CMAKE_BUILD_DIR) so the suite compiles nothing twice; then the
# README's Python example, exactly as written there, runs against the installed package from
# another folder.
#   pip_install_test.sh <cmake build dir> <repository>
set -euo pipefail
build_dir=$1
repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
KVCODEC_CMAKE_BUILD_DIR=$build_dir /usr/bin/python3 -m pip install --quiet --no-index --no-build-isolation --no-deps \
  --root-user-action=ignore --target "$tmp/site" "$repo/python"
test -f "$tmp/site/kvcodec/__init__.py"
ls "$tmp"/site/kvcodec/_kvcodec*.so >/dev/null
# The first ```python block after "## Python" in README.md.
awk '/^## Python/ {in_section = 1} in_section && /^```python$/ {grab = 1; next} grab && /^```$/ {exit} grab' \
  "$repo/README.md" > "$tmp/example.py"
[[ -s $tmp/example.py ]] || { echo "no Python example in README.md" >&2; exit 1; }
cd "$tmp"
output=$(PYTHONPATH="$tmp/site" OPENBLAS_NUM_THREADS=1 /usr/bin/python3 example.py)
echo "$output"
PYTHONPATH="$tmp/site" /usr/bin/python3 -c 'import kvcodec, sys; sys.exit(0 if kvcodec.__file__.startswith(sys.argv[1]) else 1)' "$tmp/site"
echo "pip install and the README example: ok"
