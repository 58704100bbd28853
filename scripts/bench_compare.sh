#!/usr/bin/env bash
# Codec speed of this checkout against an earlier revision, measured in one run: shared, noisy
# machines make MB/s from different days incomparable, so both builds are benchmarked in
# alternating rounds and compared by their medians.
#   scripts/bench_compare.sh REV [--codec kvtc] [--level 16] [--rounds 5]
# REV is built (dev preset, the CLI only) in a worktree cached under
# ${XDG_CACHE_HOME:-~/.cache}/kvcodec/bench-worktrees/<commit>; each build runs from its own tree,
# so it uses that revision's models and calibrations. Also checks that both builds decode the
# same chunk (encoded by this checkout) to the same bytes: "decode_identical". Prints one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
(($#)) || { echo "usage: $0 REV [--codec C] [--level L] [--rounds N]" >&2; exit 2; }
rev=$1
shift
codec=kvtc level=16 rounds=5
while (($#)); do
  case $1 in
    --codec) codec=$2; shift 2 ;;
    --level) level=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
commit=$(git rev-parse --verify "$rev^{commit}")
KVCODEC_LLAMA_ROOT="$(scripts/setup-llama.sh)"
export KVCODEC_LLAMA_ROOT
old=${XDG_CACHE_HOME:-$HOME/.cache}/kvcodec/bench-worktrees/$commit
if [[ ! -d $old ]]; then
  mkdir -p "$(dirname "$old")"
  git worktree add --detach "$old" "$commit" >&2
fi
for tree in "$old" "$PWD"; do
  echo "== building $tree" >&2
  (cd "$tree" && { [[ -f build/dev/CMakeCache.txt ]] || cmake --preset dev >/dev/null; } &&
    cmake --build build/dev -j"$(nproc)" --target kvcodec_cli >/dev/null)
done
results=$(mktemp)
work=$(mktemp -d)
trap 'rm -rf "$results" "$work"' EXIT
model=models/kvtiny/kvtiny.gguf cal=models/kvtiny/kvtiny.kvcal
encode_cal=()
[[ $codec == kvtc ]] && encode_cal=(--calibration "$cal")
build/dev/tools/kvcodec/kvcodec encode --model "$model" --text models/kvtiny/eval.txt --tokens 356 --token-begin 100 \
  --n-tokens 256 --codec "$codec" --level "$level" "${encode_cal[@]}" -o "$work/chunk.kvc" >&2
identical=false
for side in old new; do
  tree=$([[ $side == old ]] && echo "$old" || echo "$PWD")
  # An older build may not read a newer format: then the check says false and why, on stderr.
  "$tree/build/dev/tools/kvcodec/kvcodec" decode "$work/chunk.kvc" --model "$model" --calibration "$cal" \
    -o "$work/$side.state" >&2 || true
done
cmp "$work/old.state" "$work/new.state" >&2 && identical=true
for ((r = 1; r <= rounds; r++)); do
  for tree in "$old" "$PWD"; do
    echo "== round $r: $tree" >&2
    (cd "$tree" && build/dev/tools/kvcodec/kvcodec bench codec --codec "$codec" --level "$level" --json) |
      /usr/bin/python3 scripts/results_json.py set tree="$([[ $tree == "$old" ]] && echo old || echo new)" >> "$results"
  done
done
/usr/bin/python3 - "$results" "$commit" "$(git rev-parse HEAD)" "$identical" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = ["encode_mb_s_1t", "decode_mb_s_1t", "encode_mb_s_all", "decode_mb_s_all", "memcpy_mb_s_1t"]
out = {"old": sys.argv[2], "new": sys.argv[3] + " (working tree)", "codec": rows[0]["codec"], "level": rows[0]["level"],
       "rounds": len(rows) // 2}
for tree in ("old", "new"):
    mine = [r for r in rows if r["tree"] == tree]
    out[tree + "_ratio"] = mine[0]["compression_ratio"]
    out[tree + "_median"] = {k: round(statistics.median(r[k] for r in mine), 1) for k in keys}
out["new_over_old"] = {k: round(out["new_median"][k] / out["old_median"][k], 3) for k in keys}
out["decode_identical"] = sys.argv[4] == "true"
print(json.dumps(out, indent=2))
EOF
