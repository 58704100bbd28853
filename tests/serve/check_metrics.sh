#!/usr/bin/env bash
# Lints `kvcodec serve`'s GET /metrics with Prometheus' own promtool, after requests of each
# kind have filled its families: a scraper must accept every line (HELP/TYPE, names, suffixes).
#   check_metrics.sh KVCODEC_BIN MODEL WORKDIR      exit 77 (skipped) without promtool
set -euo pipefail
(($# == 3)) || { echo "usage: $0 KVCODEC_BIN MODEL WORKDIR" >&2; exit 2; }
source "$(dirname "$0")/serve_lib.sh"

if [[ ! -x $PROMTOOL ]]; then
  echo "SKIP: no promtool at $PROMTOOL; run scripts/setup-test-tools.sh" >&2
  exit 77
fi

start_server "$1" "$2" "$3" --parallel 2
work=$3

post() {  # PATH JSON: fails on a non-2xx answer
  curl -sfS --noproxy '*' -o /dev/null -H 'Content-Type: application/json' -d "$2" "$BASE_URL$1"
}
post /v1/completions '{"prompt": "And it came to pass", "max_tokens": 8}'
post /v1/completions '{"prompt": "And it came to pass", "max_tokens": 8, "stream": true}'
post /v1/chat/completions '{"messages": [{"role": "user", "content": "Who is there?"}], "max_tokens": 8, "stream": true}'
# An error answer too, so the by-status families have more than one label set.
curl -s --noproxy '*' -o /dev/null -H 'Content-Type: application/json' -d '{"max_tokens": 8}' "$BASE_URL/v1/completions"

curl -sfS --noproxy '*' -o "$work/metrics.txt" "$BASE_URL/metrics"
# promtool passes an empty page; the check means something only with the families there.
grep -q '^kvcodec_requests_total{' "$work/metrics.txt" \
  || { echo "FAIL: GET /metrics has no kvcodec_requests_total samples ($work/metrics.txt)" >&2; exit 1; }
# promtool 2.42 exits 3 for lint problems and 1 for parse errors, but it writes every problem,
# so any output at all is a failure too.
if ! problems=$("$PROMTOOL" check metrics <"$work/metrics.txt" 2>&1) || [[ -n $problems ]]; then
  echo "FAIL: promtool check metrics on GET /metrics ($work/metrics.txt):" >&2
  echo "$problems" >&2
  exit 1
fi
echo "ok: promtool check metrics: $(grep -c '^# TYPE ' "$work/metrics.txt") families, no problems"
