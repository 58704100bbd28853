#!/usr/bin/python3
"""Plots `kvcodec bench serve --json` output: TTFT p50/p90/p99 of each request class under each
configuration, as grouped bars. Usage: plot_serve.py REPORT.json OUT_DIR"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

report_path, out_dir = sys.argv[1:3]
report = json.load(open(report_path))
os.makedirs(out_dir, exist_ok=True)
o = report["options"]
configs = report["configs"]
classes = [("shared_prefix", "shared prefix"), ("no_prefix", "no prefix")]
percentiles = ["p50", "p90", "p99"]

fig, axes = plt.subplots(1, len(classes), figsize=(10, 4.2), sharey=True)
width = 0.8 / len(configs)
for ax, (key, label) in zip(axes, classes):
    for i, c in enumerate(configs):
        values = [c["classes"][key]["ttft_s"][p] for p in percentiles]
        xs = [x + (i - (len(configs) - 1) / 2) * width for x in range(len(percentiles))]
        bars = ax.bar(xs, values, width, label=c["name"])
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    n = configs[0]["classes"][key]["n"]
    ax.set_title(f"{label} ({n} requests)")
    ax.set_xticks(range(len(percentiles)), percentiles)
    # Log scale: a backlog's seconds and a scheduler's tens of milliseconds on one axis.
    ax.set_yscale("log")
    ax.grid(True, axis="y", which="both", alpha=0.3)
# Bars start at 0, which a log axis cannot show: the limits come from the values.
values = [c["classes"][k]["ttft_s"][p] for c in configs for k, _ in classes for p in percentiles]
positive = [v for v in values if v > 0] or [1.0]
axes[0].set_ylim(min(positive) / 2, max(positive) * 2)
axes[0].set_ylabel("time to first token (s, log scale)")
axes[1].legend(fontsize=8, title="configuration", title_fontsize=8, loc="upper left")  # over the short p50 bars
model = os.path.basename(o["model"]).removesuffix(".gguf")
if "url" in o:
    link = o["url"]
else:
    link = f"{o['link_gbps']:g} Gbps link" if o["link_gbps"] > 0 else "uncapped link"
fig.suptitle(f"bench serve: {model}, {o['requests']} requests at {o['rate']:g}/s, "
             f"{o['shared_fraction']:.0%} sharing one of {o['prefixes']} {o['prefix_tokens']}-token documents, {link}",
             fontsize=9)
fig.tight_layout(rect=(0, 0, 1, 0.95))
fig.savefig(os.path.join(out_dir, "serve_ttft.png"), dpi=110)
print(f"wrote {out_dir}/serve_ttft.png", file=sys.stderr)
