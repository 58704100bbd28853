#!/usr/bin/env bash
# Starts `kvcodec serve` behind an API key and runs openai_compat.mjs against it: the official
# OpenAI Node SDK, unchanged, must work with the server as with OpenAI's.
#   run_openai_compat.sh KVCODEC_BIN MODEL WORKDIR      exit 77 (skipped) without node or the SDK
set -euo pipefail
(($# == 3)) || { echo "usage: $0 KVCODEC_BIN MODEL WORKDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
source "$here/serve_lib.sh"

if ! command -v node >/dev/null; then
  echo "SKIP: no node; run scripts/setup.sh, then scripts/setup-test-tools.sh" >&2
  exit 77
fi
if [[ ! -f $OPENAI_NODE_MODULES/openai/package.json ]]; then
  echo "SKIP: no OpenAI SDK in $OPENAI_NODE_MODULES; run scripts/setup-test-tools.sh" >&2
  exit 77
fi

SERVER_API_KEY=test-key-123
start_server "$1" "$2" "$3" --api-key "$SERVER_API_KEY" --parallel 2
BASE_URL="$BASE_URL/v1" API_KEY="$SERVER_API_KEY" OPENAI_NODE_MODULES="$OPENAI_NODE_MODULES" \
  node "$here/openai_compat.mjs"
