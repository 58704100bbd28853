# Sourced by the tests here: starts `kvcodec serve` on a free port and stops it when the test
# exits, whatever way it exits.
#   start_server KVCODEC_BIN MODEL WORKDIR [serve flags...]   sets BASE_URL (http://host:port)
# With SERVER_API_KEY set, the readiness probe sends it (in case /health is behind the key too).
source "$(dirname "${BASH_SOURCE[0]}")/tool_versions.env"

SERVER_PID=
SERVER_LOG=

stop_server() {
  [[ -n $SERVER_PID ]] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  # SIGTERM drains the background stores first; a server that hangs must not hang the test.
  for _ in {1..100}; do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
}

# On failure the server's own account is what explains it.
on_exit() {
  local rc=$?
  stop_server
  if ((rc != 0 && rc != 77)) && [[ -s $SERVER_LOG ]]; then
    echo "--- server log ($SERVER_LOG), last lines:" >&2
    tail -n 30 "$SERVER_LOG" >&2
  fi
  exit "$rc"
}

start_server() {
  local bin=$1 model=$2 work=$3
  shift 3
  rm -rf "$work"
  mkdir -p "$work"
  SERVER_LOG=$work/server.log
  trap on_exit EXIT
  # A test killed (ctest's timeout, ^C) must not leave its server behind: exit runs on_exit.
  trap 'exit 143' TERM
  trap 'exit 130' INT
  # Port 0: the server binds any free port (no race with a port picked beforehand) and names
  # its URL on stderr once it is listening.
  "$bin" serve --model "$model" --port 0 --store "dir://$work/store" "$@" >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!
  BASE_URL=
  local auth=()
  [[ -z ${SERVER_API_KEY:-} ]] || auth=(-H "Authorization: Bearer $SERVER_API_KEY")
  local deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "FAIL: kvcodec serve exited before it was ready" >&2; return 1; }
    [[ -n $BASE_URL ]] || BASE_URL=$(grep -m1 -o 'http://[^ ]*' "$SERVER_LOG" || true)
    if [[ -n $BASE_URL ]] && curl -sf --noproxy '*' "${auth[@]}" -o /dev/null "$BASE_URL/health"; then
      return 0
    fi
    sleep 0.1
  done
  echo "FAIL: kvcodec serve did not answer GET /health within 60 s" >&2
  return 1
}
