#!/usr/bin/env bash
# The whole test suite: set up and build, then every test (unit, model, slow) in the dev
# build, and the unit tests and fuzz-corpus replays again under ASan+UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev asan-ubsan
echo "== dev: all tests"
ctest --preset dev -j2 --timeout 900
echo "== asan-ubsan: unit tests and fuzz replays"
ctest --preset asan-ubsan -j2 -L unit --timeout 900
