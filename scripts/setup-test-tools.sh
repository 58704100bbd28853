#!/usr/bin/env bash
# Installs the tools the serve tests check the server with (tests/serve): promtool, which lints
# GET /metrics, and the official OpenAI Node SDK, which the server must work with unchanged.
# Both go into the cache outside the clone, keyed by the versions pinned in
# tests/serve/tool_versions.env; quick when they are there. Non-interactive (CI), prints nothing
# on stdout, and fails if a tool cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/serve/tool_versions.env

log() { echo "[test-tools] $*" >&2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

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

sdk_dir=$(dirname "$OPENAI_NODE_MODULES")
if [[ ! -f $OPENAI_NODE_MODULES/openai/package.json ]]; then
  command -v npm >/dev/null || { log "npm is missing (scripts/setup.sh installs it)"; exit 1; }
  log "installing openai@$OPENAI_NODE_VERSION from the npm registry"
  # Into a temp dir beside the cache entry, then one rename: an interrupted install never leaves
  # a half-filled entry that a later run would take for finished.
  mkdir -p "$KVCODEC_TOOLS_CACHE"
  work=$(mktemp -d "$sdk_dir.work.XXXXXX")
  trap 'rm -rf "$tmp" "$work"' EXIT
  # The SDK declares node >= 22 (npm warns, does not refuse); tests/serve passes on Node 20 too.
  (cd "$work" && echo '{"private": true}' >package.json &&
    npm install --no-audit --no-fund --no-update-notifier --loglevel=error \
      "openai@$OPENAI_NODE_VERSION") >&2
  [[ -f $work/node_modules/openai/package.json ]] || { log "npm installed no openai package"; exit 1; }
  rm -rf "$sdk_dir"
  chmod 755 "$work"
  mv "$work" "$sdk_dir"
fi
if command -v node >/dev/null; then
  node -e 'require(process.argv[1])' "$OPENAI_NODE_MODULES/openai" \
    || { log "the OpenAI SDK in $sdk_dir does not load"; exit 1; }
fi
