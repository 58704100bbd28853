#!/usr/bin/env bash
# Builds the Python package's sdist and wheel into OUT_DIR, offline and out of the source tree.
# The sdist is staged in a temporary folder: python/'s package files, and in cpp/ the C++ sources
# the extension needs (the top-level CMakeLists.txt, cmake/, and the src/ modules that
# KVCODEC_PYTHON_ONLY configures, without their tests, benchmarks and fuzzers), so it builds on
# its own. The wheel is built from that sdist by Debian's pip, setuptools and wheel
# (--no-build-isolation --no-index: no PyPI), in pip's temporary folder. Nothing is written into
# the repository.
#   scripts/build_python_dist.sh OUT_DIR
# KVCODEC_CMAKE_BUILD_DIR=<a configured build of this repository> makes the wheel take that build's
# extension (brought up to date there) instead of compiling one (python/setup.py);
# PYTHON (default /usr/bin/python3, Debian's) is the interpreter the wheel is for.
set -euo pipefail
(($# == 1)) || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/python/pyproject.toml")
[[ -n $version ]] || { echo "no version in python/pyproject.toml" >&2; exit 1; }
stage=$tmp/kvcodec-$version
mkdir -p "$stage/kvcodec" "$stage/cpp"
cp "$repo"/python/{pyproject.toml,setup.py,README.md,MANIFEST.in} "$stage/"
cp "$repo"/python/kvcodec/*.py "$stage/kvcodec/"
cp "$repo/CMakeLists.txt" "$stage/cpp/"
cp -r "$repo/cmake" "$stage/cpp/"
# The modules a KVCODEC_PYTHON_ONLY configure adds: the top-level CMakeLists.txt's unindented
# add_subdirectory(src/...) lines (the others sit inside if(NOT KVCODEC_PYTHON_ONLY)).
mapfile -t modules < <(sed -n 's/^add_subdirectory(\(src\/[a-z_]*\))$/\1/p' "$repo/CMakeLists.txt")
[[ " ${modules[*]} " == *" src/python "* ]] || { echo "src/python is not among ${modules[*]}" >&2; exit 1; }
(cd "$repo" && find "${modules[@]}" -type f \( -name '*.cc' -o -name '*.h' -o -name CMakeLists.txt \) \
  ! -name '*_test.cc' ! -name '*_bench.cc' ! -name '*_fuzz.cc' -print0) |
  (cd "$repo" && xargs -0 cp --parents -t "$stage/cpp")

(cd "$stage" && "$python" -c 'import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])' \
  "$out") >"$tmp/sdist.log" 2>&1 || { cat "$tmp/sdist.log" >&2; exit 1; }
sdist=$out/kvcodec-$version.tar.gz
[[ -f $sdist ]] || { cat "$tmp/sdist.log" >&2; echo "no $sdist" >&2; exit 1; }
TMPDIR=$tmp "$python" -m pip wheel --quiet --no-index --no-build-isolation --no-deps --no-cache-dir \
  -w "$out" "$sdist"
ls "$out"/kvcodec-"$version"-*.whl >/dev/null
echo "$sdist"
ls "$out"/kvcodec-"$version"-*.whl
