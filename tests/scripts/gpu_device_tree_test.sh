#!/usr/bin/env bash
# scripts/gpu_device_tree.sh on a throwaway repository shaped like ours (a GGUF too big to
# travel, an ignored bundle folder): enter leaves a detached checkout whose travelling size fits
# and whose branch is untouched, leave restores the GGUF byte for byte, and every refusal
# (dirty tree, entered twice, bundle not ignored, still too big) leaves the checkout as it was.
# Then the real checkout: without its GGUF files it must leave room for the bundle (~37 MiB).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

repo=$work/repo
mkdir -p "$repo/scripts" "$repo/models/big" "$repo/build/bundle"
cp "$src/scripts/gpu_device_tree.sh" "$repo/scripts/"
cd "$repo"
git init -q -b main
printf 'build/\n' >.gitignore
head -c $((70 * 1024 * 1024)) /dev/urandom >models/big/big.gguf
echo "source" >README.md
echo 'echo check' >build/bundle/run.sh
git add -A
git -c user.name=t -c user.email=t@t commit -q -m init
want=$(sha256sum models/big/big.gguf)
tool=scripts/gpu_device_tree.sh

(($(bash $tool size build/bundle) > 64 * 1024 * 1024)) || fail "the test repository should start over the limit"

bash $tool enter build/bundle 2>"$work/log" || { cat "$work/log"; fail "enter failed"; }
grep -q "of 64 MiB" "$work/log" || fail "enter did not report the travelling size"
git symbolic-ref -q HEAD && fail "enter should leave HEAD detached"
[[ -z $(git ls-files '*.gguf') && ! -e models/big/big.gguf ]] || fail "the GGUF is still in the tree that travels"
size=$(bash $tool size build/bundle)
((size < 64 * 1024 * 1024)) || fail "after enter $size bytes would travel"
git ls-tree -r main --name-only | grep -q '\.gguf$' || fail "enter changed the branch"
bash $tool enter build/bundle 2>/dev/null && fail "a second enter should be refused"

bash $tool leave 2>/dev/null
[[ $(git symbolic-ref --short HEAD) == main ]] || fail "leave did not return to main"
[[ $(sha256sum models/big/big.gguf) == "$want" ]] || fail "leave did not restore the GGUF"
[[ -z $(git status --porcelain) ]] || fail "leave left changes behind"
bash $tool leave 2>/dev/null || fail "leave when not entered should do nothing and succeed"

echo "edit" >>README.md
bash $tool enter build/bundle 2>/dev/null && fail "enter with uncommitted changes should be refused"
git checkout -q README.md

mkdir -p bundle2 && echo 'echo check' >bundle2/run.sh
bash $tool enter bundle2 2>/dev/null && fail "enter with a bundle git does not ignore should be refused"
rm -rf bundle2

head -c $((70 * 1024 * 1024)) /dev/urandom >build/bundle/payload
bash $tool enter build/bundle 2>"$work/log" && fail "a bundle over the limit should be refused"
grep -q "over the runner's 64 MiB" "$work/log" || { cat "$work/log"; fail "the refusal should say why"; }
[[ $(git symbolic-ref --short HEAD) == main && $(sha256sum models/big/big.gguf) == "$want" ]] ||
  fail "a refused enter should leave the checkout on main with its GGUF"

# The project's own checkout: what travels besides the GGUF files, against the room the bundle
# (35 MiB with its model) leaves.
cd "$src"
rest=$(git ls-files -z ':!*.gguf' | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
((rest < 24 * 1024 * 1024)) ||
  fail "the checkout without its GGUF files is $rest bytes: with the ~37 MiB bundle it would not travel"
echo "PASS (the checkout without GGUF files: $rest bytes)"
