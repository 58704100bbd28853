#!/usr/bin/env bash
# The GPU check from a bundle made by scripts/gpu_bundle.sh: `bash bundle/run.sh`, with OUT set
# to where gpu_check.json goes. Unpacks payload.tar.gz (binaries, their libraries, the model)
# into a temporary folder and runs check.sh from it. Needs from the machine only the kernel,
# glibc >= 2.36, bash, coreutils, gzip/tar, awk and sed, and for NVDEC the driver's libcuda.so.1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export OUT=${OUT:-$PWD/gpu_check_out}
unpacked=$(mktemp -d "${TMPDIR:-/tmp}/kvcodec-gpu-bundle.XXXXXX")
trap 'rm -rf "$unpacked"' EXIT
tar -xzf "$here/payload.tar.gz" -C "$unpacked"
bash "$unpacked/check.sh"
