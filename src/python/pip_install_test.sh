#!/usr/bin/env bash
# The Python package as a user installs it, offline. scripts/build_python_dist.sh builds the sdist
# and the wheel (the wheel takes this build's extension, KVCODEC_CMAKE_BUILD_DIR, so the suite
# compiles nothing twice); the wheel goes into an empty venv (no system site-packages, so no
# numpy) with pip --no-index, and the README's first Python example runs there exactly as written,
# from another folder; every Python example of the README's Python section runs in a second venv
# that sees Debian's numpy. The sdist installs with pip --no-index too, and its C++ sources
# configure on their own (every source file CMake names is in it). The source tree gains nothing:
# no python/build, python/*.egg-info or build/python.
#   pip_install_test.sh <cmake build dir> <repository>
set -euo pipefail
build_dir=$(cd "$1" && pwd)
repo=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=/usr/bin/python3

# What the source tree holds where a build would leave folders (ignored files included).
tree_files() { (cd "$repo" && find python build/python -name __pycache__ -prune -o -print 2>/dev/null | sort) || true; }
tree_files >"$tmp/tree.before"

KVCODEC_CMAKE_BUILD_DIR=$build_dir "$repo/scripts/build_python_dist.sh" "$tmp/dist" >/dev/null
wheels=("$tmp"/dist/kvcodec-*.whl)
sdists=("$tmp"/dist/kvcodec-*.tar.gz)
if ((${#wheels[@]} != 1 || ${#sdists[@]} != 1)); then
  ls -l "$tmp/dist" >&2
  exit 1
fi
echo "wheel $(stat -c %s "${wheels[0]}") bytes, sdist $(stat -c %s "${sdists[0]}") bytes"

# The README's Python examples: every ```python block of its "## Python" section, in order.
awk -v dir="$tmp" '/^## / {in_section = ($0 == "## Python")} in_section && /^```python$/ {n++; grab = 1; next}
  grab && /^```$/ {grab = 0; next} grab {print > (dir "/example" n ".py")}' "$repo/README.md"
[[ -s $tmp/example1.py ]] || { echo "no Python example in README.md's Python section" >&2; exit 1; }
mkdir "$tmp/elsewhere"

# The wheel in an empty venv, offline; numpy is not there, and the first example needs none.
"$python" -m venv "$tmp/venv"
(cd "$tmp/elsewhere" && "$tmp/venv/bin/python" -m pip install --quiet --no-index --no-cache-dir "${wheels[0]}")
if "$tmp/venv/bin/python" -c 'import numpy' 2>/dev/null; then
  echo "the empty venv has numpy" >&2
  exit 1
fi
(cd "$tmp/elsewhere" && OPENBLAS_NUM_THREADS=1 "$tmp/venv/bin/python" "$tmp/example1.py")
(cd "$tmp/elsewhere" && "$tmp/venv/bin/python" -c \
  'import kvcodec, sys; sys.exit(0 if kvcodec.__file__.startswith(sys.argv[1]) else 1)' "$tmp/venv/")
echo "the wheel in an empty venv and the README's first example: ok"

# The wheel where Debian's numpy and torch are visible: every example.
"$python" -m venv --system-site-packages "$tmp/venv-numpy"
(cd "$tmp/elsewhere" && "$tmp/venv-numpy/bin/python" -m pip install --quiet --no-index --no-cache-dir "${wheels[0]}")
examples=("$tmp"/example*.py)
for example in "${examples[@]}"; do
  (cd "$tmp/elsewhere" && OPENBLAS_NUM_THREADS=1 "$tmp/venv-numpy/bin/python" "$example")
done
echo "the wheel beside numpy and the README's ${#examples[@]} examples: ok"

# The sdist: pip installs it offline (with Debian's setuptools and wheel, taking this build's
# extension), and its C++ sources configure alone, away from the repository.
(cd "$tmp/elsewhere" && KVCODEC_CMAKE_BUILD_DIR=$build_dir "$python" -m pip install --quiet --no-index \
  --no-build-isolation --no-deps --no-cache-dir --root-user-action=ignore --target "$tmp/sdist-site" "${sdists[0]}")
(cd "$tmp/elsewhere" && PYTHONPATH=$tmp/sdist-site OPENBLAS_NUM_THREADS=1 "$python" "$tmp/example1.py" >/dev/null)
mkdir "$tmp/sdist"
tar -xzf "${sdists[0]}" -C "$tmp/sdist"
cmake -S "$tmp"/sdist/kvcodec-*/cpp -B "$tmp/sdist-cmake" -DKVCODEC_PYTHON_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
  "-DPython_EXECUTABLE=$python" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log" >&2; exit 1; }
echo "the sdist installs, and its C++ sources configure alone: ok"

tree_files >"$tmp/tree.after"
if ! diff "$tmp/tree.before" "$tmp/tree.after" >&2; then
  echo "building and installing left files in the source tree (above)" >&2
  exit 1
fi
echo "the source tree gained no files: ok"
