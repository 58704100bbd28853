#!/usr/bin/env bash
# Installs the tools the serve tests check the server with (tests/serve): promtool, which lints
# GET /metrics, and the JS clients the server must work with unchanged: the official OpenAI Node
# SDK, LangChain JS's @langchain/openai and the Vercel AI SDK with @ai-sdk/openai-compatible.
# Each goes into its own entry of the cache outside the clone, keyed by the versions pinned in
# tests/serve/tool_versions.env; quick when they are there. Non-interactive (CI), prints nothing
# on stdout, and fails if a tool cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/serve/tool_versions.env

log() { echo "[test-tools] $*" >&2; }

tmp=$(mktemp -d)
cleanup=("$tmp")
trap 'rm -rf "${cleanup[@]}"' EXIT

# Debian's prometheus package cannot simply be installed: its postinst wants a service user and
# starts a daemon. promtool is one static binary, so only it is taken out of the .deb.
if [[ ! -x $PROMTOOL ]]; then
  log "fetching promtool from Debian's prometheus $PROMETHEUS_DEB_VERSION"
  # apt runs the download as _apt when it can; a private temp dir would make it warn.
  chmod 755 "$tmp"
  mkdir "$tmp/deb"
  chown _apt "$tmp/deb" 2>/dev/null || true
  if ! (cd "$tmp/deb" && apt-get download -qq "prometheus=$PROMETHEUS_DEB_VERSION") >&2; then
    log "download failed; updating the package lists and retrying"
    sudo_cmd=()
    [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq >&2
    (cd "$tmp/deb" && apt-get download -qq "prometheus=$PROMETHEUS_DEB_VERSION") >&2 \
      || { log "prometheus=$PROMETHEUS_DEB_VERSION is not available; update tests/serve/tool_versions.env"; exit 1; }
  fi
  dpkg-deb -x "$tmp/deb"/prometheus_*.deb "$tmp/root"
  "$tmp/root/usr/bin/promtool" --version >/dev/null
  mkdir -p "$(dirname "$PROMTOOL")"
  install -m 755 "$tmp/root/usr/bin/promtool" "$PROMTOOL.tmp"
  mv -f "$PROMTOOL.tmp" "$PROMTOOL"
fi
"$PROMTOOL" --version >/dev/null

# npm_install_cached NODE_MODULES PACKAGE@VERSION...: installs the packages (npm adds their peers)
# into NODE_MODULES's folder unless all of them are there, then checks that each one loads.
npm_install_cached() {
  local modules=$1
  shift
  local entry
  entry=$(dirname "$modules")
  local missing=0 spec
  for spec in "$@"; do [[ -f $modules/${spec%@*}/package.json ]] || missing=1; done
  if ((missing)); then
    command -v npm >/dev/null || { log "npm is missing (scripts/setup.sh installs it)"; exit 1; }
    log "installing $* from the npm registry"
    # Into a temp dir beside the cache entry, then one rename: an interrupted install never
    # leaves a half-filled entry that a later run would take for finished.
    mkdir -p "$KVCODEC_TOOLS_CACHE"
    local work
    work=$(mktemp -d "$entry.work.XXXXXX")
    cleanup+=("$work")
    (cd "$work" && echo '{"private": true}' >package.json &&
      npm install --no-audit --no-fund --no-update-notifier --loglevel=error "$@") >&2 \
      || { log "npm could not install $*"; exit 1; }
    for spec in "$@"; do
      [[ -f $work/node_modules/${spec%@*}/package.json ]] || { log "npm installed no ${spec%@*}"; exit 1; }
    done
    rm -rf "$entry"
    chmod 755 "$work"
    mv "$work" "$entry"
  fi
  if command -v node >/dev/null; then
    for spec in "$@"; do
      node -e 'require(process.argv[1])' "$modules/${spec%@*}" \
        || { log "${spec%@*} in $entry does not load"; exit 1; }
    done
  fi
}

# Some declare node >= 22 (npm warns, does not refuse); tests/serve passes on Node 20 too.
npm_install_cached "$OPENAI_NODE_MODULES" "openai@$OPENAI_NODE_VERSION"
npm_install_cached "$LANGCHAIN_NODE_MODULES" "@langchain/openai@$LANGCHAIN_OPENAI_VERSION" \
  "@langchain/core@$LANGCHAIN_CORE_VERSION"
npm_install_cached "$VERCEL_AI_NODE_MODULES" "ai@$AI_SDK_VERSION" \
  "@ai-sdk/openai-compatible@$AI_SDK_OPENAI_COMPATIBLE_VERSION" "zod@$AI_SDK_ZOD_VERSION"
