#!/usr/bin/env bash
# Regenerates docs/compat-llama-server.md and results/compat-llama-server/report.json: kvcodec
# serve and llama.cpp's own llama-server (built from the same pinned bundle) started with the
# same llama-server command line and sent the same requests (scripts/compat_llama_server.py).
# Exits 1 while kvcodec serve lacks a flag or endpoint issue 40 names. A few seconds once both
# are built (llama-server: ~10 min the first time, cached with llama.cpp).
#   scripts/compat_llama_server.sh [--record]    (--record: also rewrite
#                                                 tests/compat/llama_server_shapes.json)
# KVCODEC=path/to/kvcodec uses that binary instead of building build/dev's kvcodec_cli.
set -euo pipefail
cd "$(dirname "$0")/.."
llama_server="$(scripts/setup-llama-server.sh)"
if [[ -z "${KVCODEC:-}" ]]; then
  [[ -f build/dev/CMakeCache.txt ]] || cmake --preset dev >&2
  cmake --build build/dev --target kvcodec_cli >&2
  KVCODEC=build/dev/tools/kvcodec/kvcodec
fi
exec /usr/bin/python3 scripts/compat_llama_server.py --llama-server "$llama_server" --kvcodec "$KVCODEC" "$@"
