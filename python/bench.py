"""The Python package's own cost per 256-token chunk, against the codec's: JSON on stdout.

For each codec and level, the same chunk of real KV (the test model's, via `kvcodec encode`, or
--kv FILE.kvc) is encoded and decoded through kvcodec.encode / kvcodec.decode and, in the same
run and interleaved with it, by the C++ codec alone (kvcodec._kvcodec.time_codec, timed in C++).
overhead_pct = (median Python call - median C++ call) / median C++ call, for encode and decode.

    PYTHONPATH=build/dev/python /usr/bin/python3 python/bench.py [--kv FILE] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

# This folder holds the package's sources without the built extension: import the installed (or
# PYTHONPATH) package instead.
HERE = pathlib.Path(__file__).resolve().parent
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != HERE]

import kvcodec  # noqa: E402
from kvcodec import _kvcodec  # noqa: E402
from kvcodec._arrays import from_tensor  # noqa: E402

ROOT = HERE.parent
RUNGS = [("quant", "8"), ("quant", "4"), ("kvtc", "16"), ("cachegen", "medium"), ("video", "8"), ("raw", "fp16")]


def real_chunk(cli: str, tokens: int) -> bytes:
    model = ROOT / "models" / "kvtiny" / "kvtiny.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "chunk.kvc"
        subprocess.run([cli, "encode", "--model", str(model), "--text", str(model.parent / "eval.txt"),
                        "--tokens", str(tokens), "--codec", "raw", "-o", str(out)], check=True, capture_output=True)
        return out.read_bytes()


def python_times(k, v, codec, level, calibration, model, rounds):
    enc, dec = [], []
    data = b""
    for _ in range(rounds):
        t0 = time.perf_counter()
        data = kvcodec.encode(k, v, codec, level, calibration=calibration, model=None if calibration else model)
        t1 = time.perf_counter()
        kvcodec.decode(data)
        t2 = time.perf_counter()
        enc.append(t1 - t0)
        dec.append(t2 - t1)
    return enc, dec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kv", help="a raw .kvc file of one chunk (default: 256 tokens of the test model)")
    parser.add_argument("--cli", default=os.environ.get("KVCODEC_CLI", str(ROOT / "build/dev/tools/kvcodec/kvcodec")))
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=30, help="calls per block; 4 blocks, C++ and Python alternating")
    args = parser.parse_args()
    raw = pathlib.Path(args.kv).read_bytes() if args.kv else real_chunk(args.cli, args.tokens)
    k, v = kvcodec.decode(raw)
    info = kvcodec.inspect(raw)
    model = info["model_fingerprint"]
    calibration = kvcodec.Calibration.load(ROOT / "models" / "kvtiny" / "kvtiny.kvcal")
    kb, dtype = from_tensor(k, "k")
    vb, _ = from_tensor(v, "v")
    rows = []
    for codec, level in RUNGS:
        cal = calibration if codec == "kvtc" else None
        times = {"cpp_encode": [], "cpp_decode": [], "py_encode": [], "py_decode": []}
        for _ in range(4):  # alternate, so drift on a shared machine hits both sides alike
            t = _kvcodec.time_codec(kb, vb, dtype, codec, level, cal.model if cal else model, args.rounds)
            times["cpp_encode"] += t["encode_s"]
            times["cpp_decode"] += t["decode_s"]
            enc, dec = python_times(k, v, codec, level, cal, model, args.rounds)
            times["py_encode"] += enc
            times["py_decode"] += dec
        med = {name: statistics.median(values) for name, values in times.items()}
        rows.append({
            "codec": codec, "level": level, "chunk_tokens": int(k.shape[1]), "fp16_bytes": int(k.nbytes + v.nbytes),
            "cpp_encode_s": med["cpp_encode"], "python_encode_s": med["py_encode"],
            "encode_overhead_pct": 100 * (med["py_encode"] - med["cpp_encode"]) / med["cpp_encode"],
            "cpp_decode_s": med["cpp_decode"], "python_decode_s": med["py_decode"],
            "decode_overhead_pct": 100 * (med["py_decode"] - med["cpp_decode"]) / med["cpp_decode"],
        })
        print(f"{codec} {level}: encode {rows[-1]['encode_overhead_pct']:+.1f}%, decode "
              f"{rows[-1]['decode_overhead_pct']:+.1f}%", file=sys.stderr)
    json.dump({"model": info["model_fingerprint"], "shape": list(k.shape), "dtype": info["dtype"],
               "rounds": 4 * args.rounds, "rows": rows}, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
