#!/usr/bin/env bash
# Regenerates docs/results-llama-server.md and docs/img/llama_server.svg: kvcodec serve beside
# llama.cpp's own llama-server (built from the same pinned bundle) on the same model, prompts and
# threads, in one run (scripts/bench_llama_server.py). About a minute once both are built
# (llama-server: ~10 min the first time, cached with llama.cpp).
#   scripts/results_llama_server.sh [REPEATS]    (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
scripts/setup.sh release
llama_server="$(scripts/setup-llama-server.sh)"
out=results/llama-server
mkdir -p "$out" docs/img
/usr/bin/python3 scripts/bench_llama_server.py --repeats "$repeats" --llama-server "$llama_server" \
  --out "$out/bench.json"
/usr/bin/python3 scripts/render_llama_server.py "$out/bench.json" --svg docs/img/llama_server.svg \
  > docs/results-llama-server.md
echo "wrote docs/results-llama-server.md and docs/img/llama_server.svg" >&2
