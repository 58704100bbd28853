#!/usr/bin/env bash
# The main job, end to end: set up and build, then take real KV caches out of the test model
# (models/kvtiny) through llama.cpp, compress them with each baseline codec, restore them into
# fresh contexts and measure what the model's predictions lost.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
kvcodec=build/dev/tools/kvcodec/kvcodec
mkdir -p results
$kvcodec codecs
for spec in "raw:" "quant:8" "quant:4" "kvtc:16" "kvtc:20" "video:8"; do
  codec=${spec%%:*}
  level=${spec#*:}
  echo
  $kvcodec eval --codec "$codec" ${level:+--level "$level"} --docs 8 --ctx 1024 --cont 128 --json \
    | tee "results/eval-$codec${level:+-$level}.json"
done
echo
echo "reports written to results/eval-*.json"
