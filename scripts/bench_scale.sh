#!/usr/bin/env bash
# How reuse scales with the prefix (docs/results.md, "TTFT against prefix length"):
#  1. `kvcodec bench ttft` at 1K-32K stored prefix tokens for kvtc and video at 0.01-10 Gbps
#     (TTFT, its parts, its bound and peak memory per point) -> $OUT/ttft_scale.json;
#  2. `kvcodec run`'s peak RSS on a prompt of about 33K tokens: a cold run that prefills and
#     stores it, then a warm one that restores the stored prefix -> $OUT/run_scale_{cold,warm}.json.
# Usage: scripts/bench_scale.sh [MODEL] (default models/kvtiny/kvtiny.gguf); KVCODEC_BIN picks the
# binary (default build/release's), OUT the output folder (default results/).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${KVCODEC_BIN:-build/release/tools/kvcodec/kvcodec}
MODEL=${1:-models/kvtiny/kvtiny.gguf}
OUT=${OUT:-results}
PREFIXES=${PREFIXES:-1024,4096,16384,32768}
mkdir -p "$OUT"
[[ -x "$BIN" ]] || { echo "no $BIN: build it first (cmake --build build/release)" >&2; exit 1; }

echo "== bench ttft at $PREFIXES prefix tokens" >&2
"$BIN" bench ttft --model "$MODEL" --codecs kvtc,video --prefix-tokens "$PREFIXES" \
  --link-gbps 0.01,0.1,1,10 --repeats 3 --json > "$OUT/ttft_scale.json"

echo "== kvcodec run on a long prompt, cold then warm" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
text="$(dirname "$MODEL")/eval.txt"
# About 4 bytes a token in the test models' text: 132 KB is some 33K tokens.
head -c "${PROMPT_BYTES:-132000}" "$text" > "$work/prompt.txt"
for pass in cold warm; do
  "$BIN" run "$work/prompt.txt" --model "$MODEL" --store "dir://$work/store" -n 4 --json > "$OUT/run_scale_$pass.json"
done
/usr/bin/python3 - "$OUT" "$MODEL" <<'PY'
import json, os, sys
out, model = sys.argv[1], sys.argv[2]
model_bytes = os.path.getsize(model)
scale = json.load(open(f"{out}/ttft_scale.json"))
first = scale["prefixes"][0]
kv_per_token = first["kv_fp16_bytes"] / first["prefix_tokens"]
for p in ("cold", "warm"):
    r = json.load(open(f"{out}/run_scale_{p}.json"))
    kv = r["prompt_tokens"] * kv_per_token
    peak = r["peak_rss_bytes"]
    print(f"run {p}: {r['prompt_tokens']} prompt tokens ({r['reused_tokens']} reused), TTFT {r['ttft_s']:.3f} s, "
          f"peak RSS {peak / 1e6:.1f} MB = model {model_bytes / 1e6:.1f} MB + {(peak - model_bytes) / kv:.2f} x "
          f"the prompt's fp16 KV ({kv / 1e6:.1f} MB)")
for row in scale["rows"]:
    print(f"ttft {row['codec']:6} {row['link_gbps']:>5} Gbps {row['prefix_tokens']:>6} tokens: "
          f"TTFT {row['ttft_s']:.3f} s ({row['ttft_over_bound']:.2f}x bound), "
          f"{row['reuse_per_prefix_token_us']:.2f} us/token without the suffix prefill, "
          f"peak growth {row['peak_rss_growth_per_prefix_token']:.0f} B/token")
PY
