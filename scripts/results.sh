#!/usr/bin/env bash
# Regenerates docs/results.md (and docs/results-zoo.md): `kvcodec eval` for every codec and level
# on each test model, rotquant beside quant and kvtc on the model zoo, the kvtc entropy stages side
# by side, a kvtc grouping/group-size ablation, the video codec's layout ablation and quantiser
# groups, and codec speeds.
# Every figure in that file comes from this command.
#   scripts/results.sh [--docs N] [--ctx N] [--cont N] [--no-ablation] [--no-build]
#   scripts/results.sh --quality-only [--out DIR] [--docs N] [--ctx N] [--cont N] [--no-build]
# --quality-only runs only the `kvcodec eval` loops (every codec and level on kvtiny and kvmini, the
# files docs/results.md's accuracy tables come from) into DIR (relative to the repository root;
# default results/eval; its *.json are replaced) and renders nothing: compare two such folders
# with scripts/compare_quality.py to see whether a change moved any quality figure, or render one
# (results/eval) and hold it to the committed tables:
#   scripts/render_results.py 8 1024 128 > /tmp/r.md && scripts/compare_quality.py --tables docs/results.md /tmp/r.md
# --no-build uses build/dev as it is (no scripts/setup.sh).
# JSON edits and look-ups are scripts/results_json.py's.
set -euo pipefail
cd "$(dirname "$0")/.."
docs=8 ctx=1024 cont=128 ablation=1 quality_only=0 build=1 out=
while (($#)); do
  case $1 in
    --docs) docs=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --cont) cont=$2; shift 2 ;;
    --no-ablation) ablation=0; shift ;;
    --quality-only) quality_only=1; shift ;;
    --out) out=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
# The full run renders from results/eval, so only a quality-only run may write elsewhere.
if [[ -n $out ]] && ((!quality_only)); then
  echo "--out needs --quality-only (render_results.py reads results/eval)" >&2
  exit 2
fi
out=${out:-results/eval}
if ((build)); then scripts/setup.sh dev; fi
kvcodec=build/dev/tools/kvcodec/kvcodec
json=(/usr/bin/python3 scripts/results_json.py)
mkdir -p "$out"
rm -f "$out"/*.json
models=(models/kvtiny/kvtiny.gguf models/kvmini/kvmini.gguf)

eval_one() {  # name model codec level extra-args...
  local name=$1 model=$2 codec=$3 level=$4
  shift 4
  echo "== $name $codec $level $*" >&2
  $kvcodec eval --model "$model" --codec "$codec" --level "$level" --docs "$docs" --ctx "$ctx" --cont "$cont" \
    --json --quiet "$@"
}

i=0
for model in "${models[@]}"; do
  name=$(basename "$model" .gguf)
  cal=${model%.gguf}.kvcal
  # The calibration (and its report, which holds the reverse water-filling rates) is made once
  # per model and committed; delete both to refit.
  if [[ ! -f $cal || ! -f $cal.json ]]; then
    echo "== calibrating $name" >&2
    $kvcodec calibrate --model "$model" --text "$(dirname "$model")/calib.txt" --out "$cal" --json --quiet > "$cal.json"
  fi
  while IFS=' ' read -r codec level; do
    i=$((i + 1))
    eval_one "$name" "$model" "$codec" "$level" > "$out/$(printf %03d $i)-$name-$codec-$level.json"
    if [[ $codec == kvtc ]]; then
      for entropy in deflate none; do
        i=$((i + 1))
        eval_one "$name" "$model" kvtc "$level" --param entropy=$entropy \
          | "${json[@]}" append-suffix codec "+$entropy" \
          > "$out/$(printf %03d $i)-$name-kvtc-$entropy-$level.json"
      done
    fi
  done < <($kvcodec codecs --json | "${json[@]}" levels)
done
if ((quality_only)); then
  echo "wrote $out" >&2
  exit 0
fi

# kvtc: how coefficients are quantised, which features share a basis, and (token-group) how many
# components share a scale (kvtiny).
abl=results/ablation
mkdir -p "$abl"
rm -f "$abl"/[!k]*.json  # keep the ablation calibrations (kvtiny-*)
if ((ablation)); then
  for spec in component:layer:0 component:layer-head:0 token-group:layer:16 token-group:layer-head:16 \
              token-group:all:16 token-group:layer:8 token-group:layer:32; do
    IFS=: read -r quantizer group size <<< "$spec"
    cal=$abl/kvtiny-$quantizer-$group-$size.kvcal
    echo "== ablation $quantizer $group $size" >&2
    if [[ ! -f $cal || ! -f $cal.json ]]; then
      $kvcodec calibrate --text models/kvtiny/calib.txt --quantizer "$quantizer" --group "$group" \
        --group-size "$size" --no-profile --out "$cal" --json --quiet > "$cal.json"
    fi
    for level in 16 24 32; do
      eval_one kvtiny models/kvtiny/kvtiny.gguf kvtc "$level" --calibration "$cal" \
        | "${json[@]}" set quantizer="$quantizer" grouping="$group" group_size:="$size" \
        > "$abl/$quantizer-$group-$size-$level.json"
    done
  done
fi

# video: what each layout step earns with each lossless coder, against general-purpose coders on
# the same 8-bit codes (kvtiny, 256-token chunks); and how many channels share a quantiser scale.
vid=results/video
mkdir -p "$vid"
rm -f "$vid"/*.json
if ((ablation)); then
  echo "== video layout ablation" >&2
  $kvcodec bench video --json --quiet > "$vid/ablation.json"
  for group in 1 8 64 128; do
    for level in 8 6 4; do
      eval_one kvtiny models/kvtiny/kvtiny.gguf video "$level" --param group=$group \
        | "${json[@]}" set group:="$group" \
        > "$vid/group-$(printf %03d $group)-$level.json"
    done
  done
fi

# Time to first token with a stored prefix, per codec and link rate, and the projection; plots.
ttft=results/ttft
mkdir -p "$ttft" docs/img
rm -f "$ttft"/*.json
echo "== bench ttft" >&2
$kvcodec bench ttft --json --quiet > "$ttft/ttft.json"
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  echo "== installing python3-matplotlib (for the plots)" >&2
  sudo_cmd=(); ((EUID == 0)) || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-matplotlib >/dev/null
fi
/usr/bin/python3 scripts/plot_ttft.py "$ttft/ttft.json" docs/img

# TTFT and memory against the prefix length (1K-32K tokens), and kvcodec run's peak RSS at ~33K.
rm -rf results/scale
KVCODEC_BIN="$kvcodec" OUT=results/scale scripts/bench_scale.sh
/usr/bin/python3 scripts/plot_ttft_scale.py results/scale/ttft_scale.json docs/img > /dev/null

# Serving under load: one trace against no reuse, FIFO and KV-aware in-process servers; plot.
serve=results/serve
mkdir -p "$serve"
rm -f "$serve"/*.json
echo "== bench serve" >&2
$kvcodec bench serve --json --quiet > "$serve/serve.json"
/usr/bin/python3 scripts/plot_serve.py "$serve/serve.json" docs/img

# Speed on real KV: 256-token chunks, one thread and all cores, beside memcpy.
bench=results/bench
mkdir -p "$bench"
rm -f "$bench"/*.json
for spec in raw: planes: quant:8 quant:4 rotquant:4 rotquant:3 rotquant:2 kvtc:16 kvtc:20 cachegen:medium cachegen:low video:8 \
            video:4; do
  codec=${spec%%:*} level=${spec#*:}
  echo "== bench $codec $level" >&2
  $kvcodec bench codec --codec "$codec" ${level:+--level "$level"} --json > "$bench/$codec-$level.json"
done

# The Python package's own cost per chunk, against the codec called from C++ (python/bench.py).
echo "== python bench" >&2
PYTHONPATH=build/dev/python OPENBLAS_NUM_THREADS=1 KVCODEC_CLI=$kvcodec /usr/bin/python3 python/bench.py \
  > results/python_bench.json

# Every codec on every model of the zoo (docs/results-zoo.md; results.md's rotquant/quant/kvtc
# comparison reads the same files).
scripts/results_zoo.sh

# rotquant's optional parts on every zoo model (entropy coding, a residual sign bit, QJL, RoPE).
rq=results/rotquant
mkdir -p "$rq"
rm -f "$rq"/*.json
for meta in models/*/model.json; do
  m=$(basename "$(dirname "$meta")")
  read -r rq_ctx rq_chunk < <("${json[@]}" ctx-chunk "$meta")
  echo "== bench rotquant $m" >&2
  $kvcodec bench rotquant --model "models/$m/$m.gguf" --ctx "$rq_ctx" --chunk "$rq_chunk" --json --quiet > "$rq/$m.json"
done

# kvtc's decode arithmetic per level (from the calibration alone).
/usr/bin/python3 scripts/kvcal_cost.py models/kvtiny/kvtiny.kvcal > results/kvtc_cost.json

/usr/bin/python3 scripts/render_results.py "$docs" "$ctx" "$cont" > docs/results.md
echo "wrote docs/results.md" >&2
