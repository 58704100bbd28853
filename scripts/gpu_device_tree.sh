#!/usr/bin/env bash
# The checkout a lent GPU machine receives, small enough to travel. The device runner copies the
# working tree (tracked files and untracked ones git does not ignore) together with the carried
# bundle, 64 MiB at most; the zoo's GGUF files alone are 71 MiB, so from the usual checkout every
# call would be refused. `enter` switches to a detached commit of HEAD without the `*.gguf` files
# (the bundle brings its own model) and checks what would travel; `leave` switches back, which
# restores them. The branch itself is never changed.
#   scripts/gpu_device_tree.sh enter BUNDLE_DIR   (e.g. build/gpu-bundle/bundle)
#   scripts/gpu_device_tree.sh leave
#   scripts/gpu_device_tree.sh size [BUNDLE_DIR]  what would travel now, in bytes
set -euo pipefail
cd "$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)"

LIMIT=$((64 * 1024 * 1024))
state_file="$(git rev-parse --git-dir)/kvcodec-device-tree"
log() { echo "[gpu_device_tree] $*" >&2; }
die() { log "$*"; exit 1; }

# Bytes the runner would copy: every file git tracks or would add, plus the carried folder.
travelling_bytes() {
  local tree bundle=0
  tree=$(git ls-files -z --cached --others --exclude-standard |
           xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
  [[ -z ${1:-} ]] || bundle=$(du -sb -- "$1" | awk '{print $1}')
  echo $((tree + bundle))
}

mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }

case ${1:-} in
  enter)
    bundle=${2:?usage: scripts/gpu_device_tree.sh enter BUNDLE_DIR}
    [[ -f $bundle/run.sh ]] || die "$bundle/run.sh missing: make the bundle first (scripts/gpu_bundle.sh $bundle)"
    [[ ! -e $state_file ]] || die "already entered (from $(cat "$state_file")): run 'scripts/gpu_device_tree.sh leave' first"
    [[ -z $(git status --porcelain) ]] || die "the working tree has changes or untracked files: commit or stash them first"
    git check-ignore -q -- "$bundle" || die "$bundle is not ignored by git: it would travel twice (as the tree and as carry)"
    from=$(git symbolic-ref -q --short HEAD || git rev-parse HEAD)
    mapfile -t models < <(git ls-files -- '*.gguf')
    git switch -q --detach
    echo "$from" >"$state_file"
    if ((${#models[@]})); then
      git rm -q -- "${models[@]}"
      git -c user.name=kvcodec -c user.email=kvcodec@localhost commit -q --no-verify \
        -m "device tree: $from without its ${#models[@]} GGUF files"
    fi
    bytes=$(travelling_bytes "$bundle")
    if ((bytes > LIMIT)); then
      "$0" leave
      die "tree and bundle are $(mib "$bytes"), over the runner's 64 MiB: not entered"
    fi
    log "on a detached checkout of $from without ${#models[@]} GGUF files; tree and bundle: $(mib "$bytes") of 64 MiB"
    log "now: run(command=\"bash $bundle/run.sh\", carry=[\"$bundle\"], timeout_s=480); then: scripts/gpu_device_tree.sh leave"
    ;;
  leave)
    [[ -e $state_file ]] || { log "not entered: nothing to do"; exit 0; }
    from=$(cat "$state_file")
    # Only the device commit's own files may differ: anything else is someone's work.
    [[ -z $(git status --porcelain) ]] || die "the working tree has changes: commit or stash them, then leave again"
    git switch -q "$from" 2>/dev/null || git switch -q --detach "$from"
    rm -f "$state_file"
    log "back on $from ($(git ls-files -- '*.gguf' | wc -l) GGUF files restored)"
    ;;
  size)
    echo "$(travelling_bytes "${2:-}")"
    ;;
  *)
    echo "usage: scripts/gpu_device_tree.sh enter BUNDLE_DIR | leave | size [BUNDLE_DIR]" >&2
    exit 2
    ;;
esac
