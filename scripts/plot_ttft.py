#!/usr/bin/python3
"""Plots `kvcodec bench ttft --json` output: the measured TTFT per codec and link rate, and the
labelled projection to 7B-70B shapes. Usage: plot_ttft.py REPORT.json OUT_DIR"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

report_path, out_dir = sys.argv[1:3]
report = json.load(open(report_path))
os.makedirs(out_dir, exist_ok=True)
codecs = []
for r in report["rows"]:
    if r["codec"] not in codecs:
        codecs.append(r["codec"])

fig, ax = plt.subplots(figsize=(7, 4.5))
for c in codecs:
    rows = [r for r in report["rows"] if r["codec"] == c]
    ax.plot([r["link_gbps"] for r in rows], [r["ttft_s"] for r in rows], marker="o", label=f"{c} reuse")
ax.axhline(report["recompute_ttft_s"], color="black", linestyle="--", label="recompute (no reuse)")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("link rate (Gbps, emulated in process)")
ax.set_ylabel("time to first token (s)")
model = os.path.basename(report["model"]).removesuffix(".gguf")
ax.set_title(f"Measured: {model}, {report['prompt_tokens']}-token prompt, {report['reused_tokens']} tokens reused")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(os.path.join(out_dir, "ttft_measured.png"), dpi=110)

points = report["projection"]["points"]
models = []
for p in points:
    if p["model"] not in models:
        models.append(p["model"])
fig, axes = plt.subplots(1, len(models), figsize=(4 * len(models), 4), sharey=True)
for ax, m in zip(axes, models):
    mp = [p for p in points if p["model"] == m]
    for c in codecs:
        cp = [p for p in mp if p["codec"] == c]
        if cp:
            ax.plot([p["link_gbps"] for p in cp], [p["ttft_s"] for p in cp], marker="o", label=c)
    ax.axhline(mp[0]["recompute_s"], color="black", linestyle="--", label="recompute")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(f"{m} (projection)")
    ax.set_xlabel("link rate (Gbps)")
    ax.grid(True, which="both", alpha=0.3)
axes[0].set_ylabel("projected TTFT (s)")
axes[0].legend(fontsize=7)
fig.suptitle("PROJECTION, not a measurement: " + report["projection"]["assumptions"], fontsize=7, wrap=True)
fig.tight_layout(rect=(0, 0, 1, 0.9))
fig.savefig(os.path.join(out_dir, "ttft_projection.png"), dpi=110)
print(f"wrote {out_dir}/ttft_measured.png and {out_dir}/ttft_projection.png", file=sys.stderr)
