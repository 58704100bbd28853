#!/usr/bin/env bash
# Starts `kvcodec serve` behind an API key and runs one client's checks against it (SCRIPT, an .mjs
# here): a JS client library, unchanged, must work with the server as with OpenAI's.
#   run_node_client.sh KVCODEC_BIN MODEL WORKDIR SCRIPT MODULES_VAR
# MODULES_VAR names the variable in tool_versions.env that holds the client's cached node_modules.
# Exit 77 (skipped) without node or the cached client.
set -euo pipefail
(($# == 5)) || { echo "usage: $0 KVCODEC_BIN MODEL WORKDIR SCRIPT MODULES_VAR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
source "$here/serve_lib.sh"
script=$4
modules=${!5:?"$5 is not set in tool_versions.env"}

if ! command -v node >/dev/null; then
  echo "SKIP: no node; run scripts/setup.sh, then scripts/setup-test-tools.sh" >&2
  exit 77
fi
# scripts/setup-test-tools.sh renames a finished install into place, so the folder is all of it.
if [[ ! -d $modules ]]; then
  echo "SKIP: no $modules; run scripts/setup-test-tools.sh" >&2
  exit 77
fi

SERVER_API_KEY=test-key-123
start_server "$1" "$2" "$3" --api-key "$SERVER_API_KEY" --parallel 2
BASE_URL="$BASE_URL/v1" API_KEY="$SERVER_API_KEY" CLIENT_NODE_MODULES="$modules" node "$here/$script"
