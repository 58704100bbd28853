"""rotquant beside quant and kvtc on the model zoo (results/zoo/<model>.json, written by
scripts/results_zoo.sh): shared by render_zoo.py (docs/results-zoo.md) and render_results.py
(docs/results.md), so both documents print the same figures from the same files."""

import glob
import json
import os

HELD_OUT = "kvjargon"  # the model no default was tuned on


def worst_bounds(rung):
    """A profile rung (docs/format.md, "Quality profile") as the floor judges it: its worst bound over
    the windows scored after the restored prefixes, as ppl_delta_pct, top1_agreement and kl_mean."""
    w = rung["windows"]
    return dict(rung,
                ppl_delta_pct=max(x["ppl_delta_pct_bound"] for x in w),
                top1_agreement=min(x["top1_agreement_bound"] for x in w),
                kl_mean=max(x["kl_mean_bound"] for x in w))


def load_zoo():
    """{model: profile} for every results/zoo/*.json, each rung with its worst bounds as its figures
    (worst_bounds), and the models in report order (held out last)."""
    zoo = {os.path.basename(p)[:-5]: json.load(open(p)) for p in sorted(glob.glob("results/zoo/*.json"))}
    for p in zoo.values():
        p["rungs"] = [worst_bounds(r) for r in p["rungs"]]
    return zoo, sorted(zoo, key=lambda m: (m == HELD_OUT, m))


def has_rotquant(zoo):
    return any(r["codec"] == "rotquant" for p in zoo.values() for r in p["rungs"])


def print_kvtc_against_rotquant(zoo, order):
    """For each rotquant level, the highest kvtc ratio whose mean KL is no larger."""
    print("rotquant needs no calibration; kvtc does (`kvcodec calibrate`). For each rotquant level, the highest")
    print("kvtc ratio whose mean KL divergence from the uncompressed run is no larger: up to that ratio kvtc")
    print("beats rotquant at equal quality, by the factor shown.\n")
    print("| model | rotquant level | its ratio | its kl_mean | kvtc at equal quality | kvtc level | kvtc / rotquant |")
    print("|---|---|---:|---:|---:|---|---:|")
    for m in order:
        rungs = zoo[m]["rungs"]
        kvtc = [r for r in rungs if r["codec"] == "kvtc"]
        for rq in (r for r in rungs if r["codec"] == "rotquant"):
            same = [r for r in kvtc if r["kl_mean"] <= rq["kl_mean"]]
            b = max(same, key=lambda r: r["ratio"]) if same else None
            cells = f"{b['ratio']:.1f}x | {b['level']} | {b['ratio'] / rq['ratio']:.1f}x" if b else "none | | "
            print(f"| {m} | {rq['level']} | {rq['ratio']:.2f}x | {rq['kl_mean']:.5f} | {cells} |")
    print()


def print_side_by_side(zoo, order, max_ppl, min_top1):
    """Every rung of rotquant, quant and kvtc on every model, in that order."""
    print("| model | codec | level | ratio | ppl_delta_pct | top1_agreement | kl_mean | within |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for m in order:
        for codec in ("rotquant", "quant", "kvtc"):
            for r in (r for r in zoo[m]["rungs"] if r["codec"] == codec):
                ok = r["ppl_delta_pct"] <= max_ppl and r["top1_agreement"] >= min_top1
                print(f"| {m} | {codec} | {r['level']} | {r['ratio']:.2f} | {r['ppl_delta_pct']:+.3f} | "
                      f"{r['top1_agreement']:.4f} | {r['kl_mean']:.5f} | {'yes' if ok else 'no'} |")
    print()
