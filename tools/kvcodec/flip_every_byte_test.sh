#!/usr/bin/env bash
# Flips every single byte of a real .kvc file in turn and checks `kvcodec decode` rejects each
# one with a one-line error and a non-zero exit (ctest: cli.flip_every_byte, label slow).
#   flip_every_byte_test.sh KVCODEC WORKDIR
set -euo pipefail
kvcodec=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
printf 'In the beginning God created the heaven and the earth.' > "$work/prompt.txt"
"$kvcodec" encode --text "$work/prompt.txt" --tokens 3 --codec quant --level 4 -o "$work/a.kvc" >/dev/null
"$kvcodec" decode "$work/a.kvc" >/dev/null
size=$(stat -c %s "$work/a.kvc")
rejected=0
for ((off = 0; off < size; off++)); do
  cp "$work/a.kvc" "$work/f.kvc"
  byte=$(od -An -tu1 -j "$off" -N1 "$work/a.kvc" | tr -d ' ')
  printf "\\x$(printf %02x $((byte ^ 255)))" | dd of="$work/f.kvc" bs=1 seek="$off" conv=notrunc status=none
  if "$kvcodec" decode "$work/f.kvc" >/dev/null 2>"$work/err"; then
    echo "byte $off flipped: decode succeeded" >&2
    exit 1
  fi
  if [[ $(wc -l < "$work/err") -ne 1 ]] || ! grep -q '^kvcodec: error: ' "$work/err"; then
    echo "byte $off flipped: expected one 'kvcodec: error:' line, got:" >&2
    cat "$work/err" >&2
    exit 1
  fi
  rejected=$((rejected + 1))
done
echo "all $rejected single-byte flips of a $size-byte .kvc rejected"
