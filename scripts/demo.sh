#!/usr/bin/env bash
# The main job, end to end, on the test model (models/kvtiny): set up and build; then the same
# prompt twice through `kvcodec run` with the embedded disk store — the first request prefills
# and stores the prompt's KV chunks, the second restores them from the store and prefills only
# the rest (TTFT breakdown printed) — and once more over an emulated 0.1 Gbps link. Then the
# codecs' accuracy on held-out text.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
kvcodec=build/dev/tools/kvcodec/kvcodec
mkdir -p results
$kvcodec codecs
prompt=results/demo-prompt.txt
# Within kvtiny's 1,536-token training context with the 24 tokens generated (run refuses more).
head -c 5000 models/kvtiny/eval.txt > "$prompt"
echo
echo "== request 1 (store: the embedded default; prefills and stores whatever is new)"
$kvcodec run "$prompt" -n 24
echo
echo "== request 2, same prompt: the prefix comes from the store"
$kvcodec run "$prompt" -n 24
echo
echo "== request 3, same prompt over an emulated 0.1 Gbps link"
$kvcodec run "$prompt" -n 24 --link-gbps 0.1
for spec in "raw:" "quant:8" "quant:4" "kvtc:16" "kvtc:20" "video:8"; do
  codec=${spec%%:*}
  level=${spec#*:}
  echo
  $kvcodec eval --codec "$codec" ${level:+--level "$level"} --docs 8 --ctx 1024 --cont 128 --json \
    | tee "results/eval-$codec${level:+-$level}.json"
done
echo
echo "reports written to results/eval-*.json"
