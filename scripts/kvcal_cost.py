#!/usr/bin/env python3
"""Decode arithmetic of each level of a .kvcal: how many multiply-adds the kvtc decoder's product
spends per token (every kept component of every K and V basis costs one per feature of its
basis), per fp16 byte it outputs, and the components kept by bit width.

  /usr/bin/python3 scripts/kvcal_cost.py models/kvtiny/kvtiny.kvcal [--gmac-s 36]

With --gmac-s (multiply-adds per second one core sustains in the product, e.g. from
quantizer_bench's BM_Reconstruct), also the decode speed the product alone would allow.
Layout: docs/format.md, ".kvcal calibration". Prints JSON.
"""
import argparse
import collections
import json
import struct


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvcal")
    ap.add_argument("--gmac-s", type=float, default=0.0)
    args = ap.parse_args()
    data = open(args.kvcal, "rb").read()
    if data[:4] != b"KVCL":
        raise SystemExit(f"{args.kvcal}: not a .kvcal file")
    version, header_length = struct.unpack_from("<II", data, 4)
    n_layers, n_kv_heads, head_dim = struct.unpack_from("<III", data, 28)
    n_bases, n_allocations = struct.unpack_from("<II", data, 67)
    group_size = struct.unpack_from("<I", data, 55)[0]
    pos = 12 + header_length + 4  # the header body, then its CRC
    bases = []  # (dim, n_components) of the K bases, then the V bases
    for _ in range(2 * n_bases):
        _tag, length = struct.unpack_from("<4sQ", data, pos)
        _index, dim, n_components = struct.unpack_from("<III", data, pos + 16)
        bases.append((dim, n_components))
        pos += 16 + length
    _tag, length = struct.unpack_from("<4sQ", data, pos)
    groups = struct.unpack_from("<I", data, pos + 16)[0]
    record = (20 if version >= 2 else 12) + groups
    at = pos + 20
    out_bytes_per_token = 2 * 2 * n_layers * n_kv_heads * head_dim
    levels = []
    for _ in range(n_allocations):
        ratio = struct.unpack_from("<f", data, at)[0]
        bits = data[at + record - groups: at + record]
        at += record
        macs, offset = 0, 0
        by_width = collections.Counter()
        for dim, n_components in bases:
            n_groups = -(-n_components // group_size)
            widths = bits[offset: offset + n_groups]
            offset += n_groups
            kept = len(widths.rstrip(b"\0"))
            kept_components = min(kept * group_size, n_components)
            macs += kept_components * dim
            for g in range(kept):
                by_width[widths[g]] += min(group_size, n_components - g * group_size)
        level = {
            "level": f"{ratio:g}",
            "macs_per_token": macs,
            "macs_per_output_byte": macs / out_bytes_per_token,
            "components_by_bits": {str(b): by_width[b] for b in sorted(by_width)},
        }
        if args.gmac_s > 0:
            level["product_bound_mb_s"] = args.gmac_s * 1e9 / level["macs_per_output_byte"] / 1e6
        levels.append(level)
    print(json.dumps({"kvcal": args.kvcal, "fp16_bytes_per_token": out_bytes_per_token, "levels": levels}, indent=1))


if __name__ == "__main__":
    main()
