#!/usr/bin/python3
"""Plots `kvcodec bench ttft --prefix-tokens ... --json` output (scripts/bench_scale.sh): TTFT, the
reuse part of it per prefix token, and the peak memory growth per prefix token, against the
prefix length, per codec and link rate (scripts/render_results.py renders the table).
Usage: plot_ttft_scale.py REPORT.json OUT_DIR"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

report_path, out_dir = sys.argv[1:3]
report = json.load(open(report_path))
os.makedirs(out_dir, exist_ok=True)
rows = report["rows"]
series = sorted({(r["codec"], r["link_gbps"]) for r in rows})
fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
for codec, gbps in series:
    pts = sorted((r for r in rows if r["codec"] == codec and r["link_gbps"] == gbps), key=lambda r: r["prefix_tokens"])
    x = [r["prefix_tokens"] for r in pts]
    label = f"{codec} {gbps:g} Gbps"
    axes[0].plot(x, [r["ttft_s"] for r in pts], marker="o", label=label)
    axes[1].plot(x, [r["reuse_per_prefix_token_us"] for r in pts], marker="o", label=label)
    axes[2].plot(x, [r["peak_rss_growth_per_prefix_token"] / 1024 for r in pts], marker="o", label=label)
for ax, title in zip(axes, ["TTFT (s)", "TTFT minus suffix prefill, per prefix token (us)",
                            "peak memory growth per prefix token (KiB)"]):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("stored prefix tokens")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
axes[0].set_yscale("log")
axes[1].set_yscale("log")
axes[0].legend(fontsize=7)
model = os.path.basename(report["model"]).removesuffix(".gguf")
fig.suptitle(f"kvcodec bench ttft on {model}: reuse against prefix length ({report['fetch_threads']} fetch workers)")
fig.tight_layout()
fig.savefig(os.path.join(out_dir, "ttft_scale.png"), dpi=110)
