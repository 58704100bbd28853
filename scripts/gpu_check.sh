#!/usr/bin/env bash
# The NVDEC check in one go (issue 17), within 10 minutes on a machine with one NVIDIA GPU:
#  1. builds what it needs (dev preset, optimised with tests: libav_test and the CLI) unless a build is there;
#  2. the device probe and the NVDEC tests (bit-exactness against the CPU decoder on lossless
#     HEVC 4:4:4 streams; the automatic backend's fallback) -> $OUT/nvdec_tests.json;
#  3. decode throughput of the video variant NVDEC decodes (`--param nvdec=1`: x265, three layers as the planes of
#     4:4:4 pictures) on the CPU and on NVDEC, with 1..N chunks decoded at once: fp16 MB/s,
#     chunks/s and CPU cores used -> $OUT/gpu_check.json.
# Without a device (no driver, no GPU) the tests report skipped and the NVDEC rows are absent;
# the script still exits 0 and says so: "device": "none" in the JSON.
# Usage: scripts/gpu_check.sh [OUT] (default results/gpu); MODEL picks the model (default kvtiny).
# This is the in-tree variant: it needs this project's build, Debian libraries and Python. A lent
# GPU machine has none of them: there, run the bundle of scripts/gpu_bundle.sh (same steps, its
# JSON with a few more fields; README, "Building by hand").
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/gpu}
model=${MODEL:-models/kvtiny/kvtiny.gguf}
mkdir -p "$out"
bin=build/dev/tools/kvcodec/kvcodec
test_bin=build/dev/src/libav/libav_test
if [[ ! -x $bin || ! -x $test_bin ]]; then
  echo "== building (dev: libav_test, kvcodec)" >&2
  KVCODEC_LLAMA_ROOT="$(scripts/setup-llama.sh)"
  export KVCODEC_LLAMA_ROOT
  [[ -f build/dev/CMakeCache.txt ]] || cmake --preset dev >/dev/null
  cmake --build build/dev -j"$(nproc)" --target libav_test kvcodec_cli >/dev/null
fi

echo "== NVDEC tests" >&2
"$test_bin" --gtest_filter='NvdecVideoDecoder.*:NvdecCanDecode.*:AutoVideoDecoder.*:VideoDecoderSelection.*' \
  --gtest_output="json:$out/nvdec_tests.json" >&2

echo "== decode throughput" >&2
cores=$(nproc)
threads=(1)
for n in 2 4 8 16 32; do ((n <= cores)) && threads+=("$n"); done
backends=(cpu)
if "$bin" --video-decoder nvdec codecs >/dev/null 2>"$out/nvdec_probe.txt"; then
  backends+=(nvdec)
else
  echo "== no NVDEC here: $(cat "$out/nvdec_probe.txt")" >&2
fi
rows=$out/rows.jsonl
: > "$rows"
for backend in "${backends[@]}"; do
  for n in "${threads[@]}"; do
    echo "== $backend, $n at once" >&2
    "$bin" --video-decoder "$backend" bench codec --model "$model" --codec video --level 8 --param nvdec=1 \
      --threads "$n" --min-seconds 1 --json |
      python3 scripts/results_json.py set backend="$backend" at_once:="$n" >> "$rows"
  done
done

/usr/bin/python3 - "$out" "$rows" "$out/nvdec_tests.json" "$out/nvdec_probe.txt" <<'PY'
import json, sys
out, rows_path, tests_path, probe_path = sys.argv[1:5]
rows = [json.loads(line) for line in open(rows_path)]
tests = json.load(open(tests_path))
outcomes = {}
for suite in tests["testsuites"]:
    for t in suite["testsuite"]:
        name = suite["name"] + "." + t["name"]
        skipped = t.get("result") == "SKIPPED"
        outcomes[name] = "failed" if t.get("failures") else "skipped" if skipped else "passed"
probe = open(probe_path).read().strip()
caps = {}
for suite in tests["testsuites"]:
    for t in suite["testsuite"]:
        for key in ("nvdec_engines", "hevc444_min", "hevc444_max"):
            if key in t:
                caps[key] = t[key]
report = {"device": "none" if probe else "cuda", "device_error": probe or None, "device_caps": caps or None,
          "tests": outcomes, "throughput": []}
for r in rows:
    chunk_mb = r["bytes_fp16"] / r["n_chunks"] / 1e6
    mb_all = r["decode_mb_s_all"]
    report["throughput"].append({
        "backend": r["backend"], "chunks_at_once": r["at_once"], "compression_ratio": r["compression_ratio"],
        "decode_mb_s": mb_all, "chunks_per_s": mb_all / chunk_mb,
        "decode_mb_s_1t": r["decode_mb_s_1t"],
        # MB/s over MB per CPU-second of one thread: cores one decode keeps busy
        "cpu_cores_per_decode": r["decode_mb_s_1t"] / r["decode_mb_cpu_s_1t"] if r.get("decode_mb_cpu_s_1t") else None})
json.dump(report, open(out + "/gpu_check.json", "w"), indent=1)
failed = [n for n, o in outcomes.items() if o == "failed"]
print(json.dumps({"device": report["device"], "tests_failed": failed,
                  "skipped": sorted(n for n, o in outcomes.items() if o == "skipped")}))
sys.exit(1 if failed else 0)
PY
