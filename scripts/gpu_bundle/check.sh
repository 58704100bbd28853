#!/usr/bin/env bash
# The GPU check inside an unpacked bundle (scripts/gpu_bundle.sh; run.sh unpacks and calls this).
# Same steps and JSON as scripts/gpu_check.sh, without Python or the project's build:
#  1. device probe (`kvcodec --video-decoder nvdec codecs`: loads libcuda.so.1 from the driver);
#  2. NVDEC tests: bit-exactness against the CPU decoder on lossless HEVC 4:4:4, the automatic
#     backend's fallback; skipped without a device;
#  3. decode throughput of the NVDEC video variant on 1..N chunks at once, CPU and NVDEC.
# Writes $OUT/gpu_check.json, the tests' JSON and console output, and raw.tar.gz (the probe, every
# bench run's JSON and log): four files, within the device runner's eight that come back.
# Prints a one-line summary.
# Exits non-zero only when a test fails or a step cannot run.
# Env: OUT (default: ./gpu_check_out), MAX_AT_ONCE (default: cores, at most 16),
#      MIN_SECONDS (time per throughput measurement, default 1), MODEL (default: the bundle's).
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
final=${OUT:-$PWD/gpu_check_out}
mkdir -p "$final"
out=$(mktemp -d "${TMPDIR:-/tmp}/kvcodec-gpu-check.XXXXXX")
trap 'rm -rf "$out"' EXIT
bin=$root/bin/kvcodec
test_bin=$root/bin/libav_test
model=${MODEL:-$root/model/kvtiny.gguf}
# A bundle made with BUNDLE_MODEL=0 uses the checkout's model (run from the repository's root).
[[ -f $model || -n ${MODEL:-} || ! -f models/kvtiny/kvtiny.gguf ]] || model=$PWD/models/kvtiny/kvtiny.gguf
[[ -f $model ]] || { echo "check.sh: no model at $model (set MODEL)" >&2; exit 1; }
min_seconds=${MIN_SECONDS:-1}
start=$(date +%s)
log() { echo "== $*" >&2; }

log "bundle: $(cat "$root/BUNDLE_INFO")"
log "host: $(uname -m), glibc $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}'), $(nproc) cores"

probe=""
if "$bin" --video-decoder nvdec codecs >/dev/null 2>"$out/nvdec_probe.txt"; then
  log "NVDEC device found"
else
  probe=$(tr '\n' ' ' <"$out/nvdec_probe.txt" | sed 's/ *$//')
  log "no NVDEC here, the GPU tests are skipped: $probe"
fi

log "NVDEC tests"
tests_rc=0
"$test_bin" --gtest_filter='NvdecVideoDecoder.*:NvdecCanDecode.*:AutoVideoDecoder.*:VideoDecoderSelection.*' \
  --gtest_output="json:$out/nvdec_tests.json" >"$out/nvdec_tests.txt" 2>&1 || tests_rc=$?
# gtest's console lines name each test's outcome: [       OK ], [  SKIPPED ], [  FAILED  ].
awk '/^\[       OK \]/ {print $4, "passed"} /^\[  SKIPPED \]/ && NF >= 4 && $4 ~ /\./ {print $4, "skipped"}
     /^\[  FAILED  \]/ && $4 ~ /\./ && $5 ~ /^\(/ {print $4, "failed"}' "$out/nvdec_tests.txt" | sort -u >"$out/outcomes.txt"
n_passed=$(grep -c ' passed$' "$out/outcomes.txt" || true)
n_skipped=$(grep -c ' skipped$' "$out/outcomes.txt" || true)
n_failed=$(grep -c ' failed$' "$out/outcomes.txt" || true)
if ((tests_rc != 0 && n_failed == 0)); then
  tail -20 "$out/nvdec_tests.txt" >&2
  echo "libav_test exited $tests_rc without a failed test: it did not run" >&2
  exit 1
fi
log "tests: $n_passed passed, $n_skipped skipped, $n_failed failed"

cores=$(nproc)
max=${MAX_AT_ONCE:-$((cores < 16 ? cores : 16))}
threads=(1)
for n in 2 4 8 16 32; do ((n <= max)) && threads+=("$n"); done
backends=(cpu)
[[ -z $probe ]] && backends+=(nvdec)
rows=$out/rows.txt
: >"$rows"
for backend in "${backends[@]}"; do
  for n in "${threads[@]}"; do
    log "throughput: $backend, $n at once"
    "$bin" --video-decoder "$backend" bench codec --model "$model" --codec video --level 8 --param nvdec=1 \
      --threads "$n" --min-seconds "$min_seconds" --json >"$out/bench_${backend}_$n.json" 2>>"$out/bench.log"
    # The CLI prints one "key": value per line; one row per run, chunks/s from MB per chunk,
    # cores one decode keeps busy from MB/s over MB per CPU-second.
    awk -v backend="$backend" -v n="$n" -F': *' '
      { gsub(/[",]/, "", $1); gsub(/[ ,]/, "", $2); gsub(/^ +/, "", $1); v[$1] = $2 }
      END {
        chunk_mb = v["bytes_fp16"] / v["n_chunks"] / 1e6
        cores = v["decode_mb_cpu_s_1t"] > 0 ? sprintf("%.4f", v["decode_mb_s_1t"] / v["decode_mb_cpu_s_1t"]) : "null"
        printf "{\"backend\": \"%s\", \"chunks_at_once\": %d, \"compression_ratio\": %s, \"bytes_stored\": %s, \"n_chunks\": %s, \"decode_mb_s\": %s, \"chunks_per_s\": %.4f, \"decode_mb_s_1t\": %s, \"cpu_cores_per_decode\": %s}\n",
          backend, n, v["compression_ratio"], v["bytes_stored"], v["n_chunks"], v["decode_mb_s_all"],
          v["decode_mb_s_all"] / chunk_mb, v["decode_mb_s_1t"], cores
      }' "$out/bench_${backend}_$n.json" >>"$rows"
  done
done

json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
caps=$(grep -oE '"(nvdec_engines|hevc444_min|hevc444_max)": *"[^"]*"' "$out/nvdec_tests.json" 2>/dev/null | sort -u | paste -sd, - || true)
{
  printf '{\n "device": "%s",\n' "$([[ -z $probe ]] && echo cuda || echo none)"
  printf ' "device_error": %s,\n' "$([[ -z $probe ]] && echo null || json_str "$probe")"
  printf ' "device_caps": %s,\n' "$([[ -n $caps ]] && echo "{$caps}" || echo null)"
  printf ' "bundle": %s,\n "host": %s,\n' "$(json_str "$(cat "$root/BUNDLE_INFO")")" \
    "$(json_str "$(uname -m), glibc $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}'), $(nproc) cores")"
  printf ' "tests": {\n'
  awk '{printf "%s  \"%s\": \"%s\"", (NR > 1 ? ",\n" : ""), $1, $2} END {print ""}' "$out/outcomes.txt"
  printf ' },\n "throughput": [\n'
  awk '{printf "%s  %s", (NR > 1 ? ",\n" : ""), $0} END {print ""}' "$rows"
  printf ' ],\n "seconds": %d\n}\n' "$(($(date +%s) - start))"
} >"$out/gpu_check.json"
cp "$out/gpu_check.json" "$out/nvdec_tests.txt" "$final/"
[[ -f $out/nvdec_tests.json ]] && cp "$out/nvdec_tests.json" "$final/"
tar -czf "$final/raw.tar.gz" -C "$out" .
failed=$(awk '$2 == "failed" {print $1}' "$out/outcomes.txt" | paste -sd, -)
skipped=$(awk '$2 == "skipped" {print $1}' "$out/outcomes.txt" | paste -sd, -)
echo "{\"device\": \"$([[ -z $probe ]] && echo cuda || echo none)\", \"tests_passed\": $n_passed, \"tests_failed\": [${failed:+\"${failed//,/\",\"}\"}], \"skipped\": [${skipped:+\"${skipped//,/\",\"}\"}], \"json\": \"$final/gpu_check.json\", \"seconds\": $(($(date +%s) - start))}"
((n_failed == 0))
