#!/usr/bin/env bash
# Regenerates docs/results-zoo.md: every codec's rungs on every model of the zoo (models/*/),
# profiled on its held-out eval.txt as `kvcodec profile` measures (the first 8 and 32 tokens
# after restored prefixes up to min(1024, training context), with bounds), beside what `kvcodec
# calibrate` chose for it and why and the kvtc curve against the reverse water-filling rate.
# Every figure in that file comes from this command (about 15 minutes on 2 cores).
#   scripts/results_zoo.sh [MODEL ...]    (default: every model with a model.json)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
kvcodec=build/dev/tools/kvcodec/kvcodec
out=results/zoo
mkdir -p "$out"
models=("$@")
if ((${#models[@]} == 0)); then
  for meta in models/*/model.json; do models+=("$(basename "$(dirname "$meta")")"); done
fi
for m in "${models[@]}"; do
  if [[ ! -f models/$m/$m.kvcal || ! -f models/$m/$m.kvcal.json ]]; then
    echo "== calibrating $m" >&2
    $kvcodec calibrate --model "models/$m/$m.gguf" --text "models/$m/calib.txt" --json --quiet \
      > "models/$m/$m.kvcal.json"
  fi
  echo "== $m: every rung on eval.txt (the profile's default geometry)" >&2
  $kvcodec profile --model "models/$m/$m.gguf" --text "models/$m/eval.txt" --out "$out/$m.json" --quiet
done
/usr/bin/python3 scripts/render_zoo.py > docs/results-zoo.md
echo "wrote docs/results-zoo.md" >&2
