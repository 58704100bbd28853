# shellcheck shell=bash
# Sourced by setup-llama.sh and setup-llama-server.sh: the pinned llama.cpp source comes out of
# the npm package node-llama-cpp, whose tarball carries it as a git bundle.
# clone_llama_source WORK VERSION leaves the source in WORK/src.
clone_llama_source() {
  local work="$1" version="$2"
  (cd "$work" && npm pack --silent "node-llama-cpp@$version" >/dev/null)
  tar -xzf "$work/node-llama-cpp-$version.tgz" -C "$work" package/llama/gitRelease.bundle
  git clone --quiet "$work/package/llama/gitRelease.bundle" "$work/src" 2>/dev/null
}
