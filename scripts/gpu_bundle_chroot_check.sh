#!/usr/bin/env bash
# Proves the GPU check bundle needs nothing from the machine but the kernel and glibc (issue 41):
# runs bundle/run.sh inside a bare Debian 12 root (debootstrap --variant=minbase: no libavcodec,
# no OpenBLAS, no llama.cpp, no Python), checks with ldd there that every library resolves into the
# bundle but glibc's, and compares the CPU results (test outcomes, stored bytes, compression
# ratios) with a run of the same bundle outside. Prints one PASS/FAIL line; exits 0 on PASS.
# Needs root (chroot, mount) and Debian's archive the first time (the root is cached outside the
# clone, ~1 min to make, ~100 MB). Usage: scripts/gpu_bundle_chroot_check.sh [BUNDLE_DIR]
# (default build/gpu-bundle/bundle, made by scripts/gpu_bundle.sh when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-build/gpu-bundle/bundle}
cache=${KVCODEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvcodec}
root=$cache/debootstrap-bookworm-minbase
work=$(mktemp -d "${TMPDIR:-/tmp}/kvcodec-chroot-check.XXXXXX")
log() { echo "[chroot-check] $*" >&2; }
t0=$(date +%s)
step() { log "$* ($(($(date +%s) - t0)) s)"; }
[[ $(id -u) -eq 0 ]] || { echo "chroot-check: needs root" >&2; exit 1; }

if [[ ! -f $bundle/run.sh ]]; then
  step "making the bundle in $bundle"
  scripts/gpu_bundle.sh "$bundle"
fi
if [[ ! -x $root/bin/bash ]]; then
  command -v debootstrap >/dev/null || { echo "chroot-check: debootstrap missing (scripts/setup.sh)" >&2; exit 1; }
  step "making the minimal Debian 12 root in $root"
  rm -rf "$root.work"
  debootstrap --variant=minbase bookworm "$root.work" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  mv "$root.work" "$root"
fi
# The root must hold none of what the bundle brings.
for lib in libavcodec.so.59 libx265.so.199 libopenblas.so.0 libllama.so.0 libdeflate.so.0 libhiredis.so.0.14; do
  if [[ -n $(find "$root/usr/lib" "$root/lib" -name "$lib" -print -quit 2>/dev/null) ]]; then
    echo "chroot-check: the root has $lib: not a bare machine" >&2
    exit 1
  fi
done
[[ ! -e $root/usr/bin/python3 ]] || { echo "chroot-check: the root has python3" >&2; exit 1; }
step "root: Debian $(cat "$root/etc/debian_version"), $(chroot "$root" dpkg-query -W | wc -l) packages, no libavcodec, OpenBLAS, llama.cpp or python3"

rm -rf "$root/bundle" "$root/out" "$root/tmp/ldd-check"
cp -r "$bundle" "$root/bundle"
mkdir -p "$root/out" "$root/tmp/ldd-check"
mounted=0
cleanup() {
  ((mounted)) && umount "$root/proc" || true
  rm -rf "$root/bundle" "$root/tmp/ldd-check" "$work"
}
trap cleanup EXIT
if ! mountpoint -q "$root/proc"; then
  mount -t proc proc "$root/proc"
  mounted=1
fi

step "ldd inside the root"
tar -xzf "$bundle/payload.tar.gz" -C "$root/tmp/ldd-check"
chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin bash -c \
  'cd /tmp/ldd-check && ldd bin/kvcodec bin/libav_test bin/lib/*.so*' >"$work/ldd.txt" 2>&1 || true
outside=$(awk '$2 == "=>" && $3 !~ /^\/tmp\/ldd-check\// {print $1 " => " $3}' "$work/ldd.txt" | sort -u |
  grep -Ev '^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1) => /(usr/)?lib/x86_64-linux-gnu/' || true)
missing=$(grep -c "not found" "$work/ldd.txt" || true)
echo "resolved outside the bundle: $(awk '$2 == "=>" && $3 !~ /^\/tmp\/ldd-check\// {print $1}' "$work/ldd.txt" | sort -u | paste -sd' ' -) (+ the loader, vdso)"
echo "resolved inside: $(awk '$2 == "=>" && $3 ~ /^\/tmp\/ldd-check\// {print $1}' "$work/ldd.txt" | sort -u | wc -l) libraries; not found: $missing"

step "run.sh inside the root (CPU mode)"
chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root OUT=/out bash /bundle/run.sh >"$work/inside.txt" 2>&1 ||
  { cat "$work/inside.txt"; echo "FAIL: run.sh failed inside the root"; exit 1; }
sed 's/^/  | /' "$work/inside.txt"
step "run.sh outside, the same bundle"
OUT=$work/outside bash "$bundle/run.sh" >"$work/outside.txt" 2>&1 ||
  { cat "$work/outside.txt"; echo "FAIL: run.sh failed outside"; exit 1; }

# What must match: device, each test's outcome, and each throughput row less its timings.
results() {
  sed -n '/"device":/p; /"tests": {/,/^ }/p' "$1"
  grep '"backend"' "$1" | sed -E 's/, "(decode_mb_s|chunks_per_s|decode_mb_s_1t|cpu_cores_per_decode)": [^,}]*//g'
}
results "$root/out/gpu_check.json" >"$work/inside.results"
results "$work/outside/gpu_check.json" >"$work/outside.results"
fail=()
diff -u "$work/outside.results" "$work/inside.results" >"$work/diff.txt" || fail+=("results differ: $(cat "$work/diff.txt")")
grep -q '"device": "none"' "$root/out/gpu_check.json" || fail+=("device is not none inside")
grep -q 'GPU tests are skipped' "$work/inside.txt" || fail+=("run.sh did not say the GPU tests were skipped")
grep -q '"NvdecVideoDecoder.BitExactAgainstTheCpu": "skipped"' "$root/out/gpu_check.json" || fail+=("the bit-exact test was not skipped")
[[ -z $outside ]] || fail+=("libraries resolved outside the bundle: $outside")
((missing == 0)) || fail+=("$missing libraries not found")
[[ $(grep -c '"backend"' "$root/out/gpu_check.json") -ge 1 ]] || fail+=("no throughput rows")
step "compared"
if ((${#fail[@]})); then
  printf 'FAIL: %s\n' "${fail[@]}"
  exit 1
fi
echo "PASS: the GPU check bundle ($(du -sb "$bundle" | awk '{printf "%.1f MiB", $1 / 1048576}')) ran in a bare Debian $(cat "$root/etc/debian_version") root in CPU mode" \
  "with the same results as outside ($(grep -c ': "passed"' "$root/out/gpu_check.json") tests passed, the GPU tests skipped," \
  "$(grep -c '"backend"' "$root/out/gpu_check.json") throughput rows) in $(($(date +%s) - t0)) s"
