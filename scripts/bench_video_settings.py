#!/usr/bin/env python3
"""The video codec's ratio/speed trade per coder and setting (docs/results.md, "video: coder
settings"): for each model, coder, encoder setting and level, `kvcodec bench codec` gives the
compression ratio, encode MB/s on one thread, and decode MB/s on one thread and with a 2-thread
pool in the codec (libavcodec's slice or frame threads): per second of wall time, and per
second of the process's CPU time ("cpu"), which other work on a shared machine barely moves
(wall-time MB/s there swing by 2x). MB/s are medians over --rounds runs.

With --before BIN (a kvcodec built from an earlier revision) the settings that binary knows are
measured with it too, in alternating runs, so both columns come from the same minutes of a
shared, noisy machine.

  scripts/bench_video_settings.py [--model models/kvtiny/kvtiny.gguf ...] [--before BIN]
      [--kvcodec build/release/tools/kvcodec/kvcodec] [--rounds 3] [--min-seconds 0.5]
      [--levels 8,6,4] [--only ffv1,x264,x265] [--all]
Prints a markdown table; --json prints the raw rows.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

# (coder, setting label, params for this tree, params for --before or None when it lacks them);
# EXTRA settings lose ratio for no speed (measured once, kept for --all).
SETTINGS = [
    ("ffv1", "range, 4 slices (old default)", {"ffv1_coder": "range"}, {}),
    ("ffv1", "golomb, 4 slices", {"ffv1_coder": "golomb"}, None),
    ("ffv1", "range, 1 slice", {"ffv1_coder": "range", "slices": "1"}, None),
    ("ffv1", "golomb, 1 slice", {"ffv1_coder": "golomb", "slices": "1"}, None),
    ("x264", "medium (default)", {"preset": "medium"}, {"preset": "medium"}),
    ("x264", "ultrafast", {"preset": "ultrafast"}, {"preset": "ultrafast"}),
    ("x265", "medium (default)", {"preset": "medium"}, {"preset": "medium"}),
    ("x265", "veryfast", {"preset": "veryfast"}, {"preset": "veryfast"}),
    ("x265", "ultrafast", {"preset": "ultrafast"}, {"preset": "ultrafast"}),
]
EXTRA = [
    ("ffv1", "range, 9 slices", {"ffv1_coder": "range", "slices": "9"}, None),
    ("ffv1", "range_def, 4 slices", {"ffv1_coder": "range_def"}, None),
    ("ffv1", "range, large context", {"ffv1_coder": "range", "ffv1_context": "1"}, None),
]
KEYS = ["compression_ratio", "encode_mb_s_1t", "decode_mb_s_1t", "decode_mb_s_2t", "encode_mb_cpu_s_1t",
        "decode_mb_cpu_s_1t", "decode_mb_cpu_s_2t"]


def bench(binary, model, coder, level, params, min_seconds):
    cmd = [binary, "bench", "codec", "--model", model, "--codec", "video", "--level", level, "--param",
           "coder=" + coder, "--threads", "2", "--min-seconds", str(min_seconds), "--json"]
    for k, v in params.items():
        cmd += ["--param", f"{k}={v}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return {k: r.get(k, float("nan")) for k in KEYS}


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="GGUF model (repeatable; default kvtiny)")
    ap.add_argument("--kvcodec", default=os.path.join(root, "build/release/tools/kvcodec/kvcodec"))
    ap.add_argument("--before", help="a kvcodec of an earlier revision, measured alongside")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=0.5)
    ap.add_argument("--levels", default="8,6,4")
    ap.add_argument("--only", default="ffv1,x264,x265", help="coders to measure")
    ap.add_argument("--all", action="store_true", help="also the settings that only lose ratio")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    models = a.model or [os.path.join(root, "models/kvtiny/kvtiny.gguf")]
    coders = a.only.split(",")
    rows = []
    for model in models:
        for coder, label, params, old_params in SETTINGS + (EXTRA if a.all else []):
            if coder not in coders:
                continue
            for level in a.levels.split(","):
                runs = {"after": [], "before": []}
                for _ in range(a.rounds):
                    runs["after"].append(bench(a.kvcodec, model, coder, level, params, a.min_seconds))
                    if a.before and old_params is not None:
                        runs["before"].append(bench(a.before, model, coder, level, old_params, a.min_seconds))
                row = {"model": os.path.basename(model).removesuffix(".gguf"), "coder": coder, "setting": label,
                       "level": level}
                for tree, rs in runs.items():
                    if rs:
                        row[tree] = {k: statistics.median(r[k] for r in rs) for k in KEYS}
                rows.append(row)
                print(f"{row['model']} {coder} {label} {level}: {json.dumps(row)}", file=sys.stderr)
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    cols = ["ratio", "encode 1t", "encode 1t cpu", "decode 1t", "decode 1t cpu", "decode 2t", "decode 2t cpu"]
    keys = ["compression_ratio", "encode_mb_s_1t", "encode_mb_cpu_s_1t", "decode_mb_s_1t", "decode_mb_cpu_s_1t",
            "decode_mb_s_2t", "decode_mb_cpu_s_2t"]
    trees = ["after", "before"] if a.before else ["after"]
    head = ["model", "coder", "setting", "level"] + [c if t == "after" else "before: " + c for t in trees for c in cols]
    print("| " + " | ".join(head) + " |")
    print("|---|---|---|" + "---:|" * (len(head) - 3))
    for r in rows:
        cells = [r["model"], r["coder"], r["setting"], r["level"]]
        for t in trees:
            v = r.get(t)
            cells += [(f"{v[k]:.3f}" if k == "compression_ratio" else f"{v[k]:.1f}") if v else "" for k in keys]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
