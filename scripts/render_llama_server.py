#!/usr/bin/env python3
"""Renders scripts/bench_llama_server.py's JSON as a markdown section on stdout, and with
--svg FILE a bar chart of the times to first token (log scale), drawn with string formatting
only so it needs nothing beyond the standard library.

  scripts/render_llama_server.py results/llama-server.json [--svg docs/img/llama-server.svg]
"""

import argparse
import json
import math
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def secs(s):
    """A median with its range: with 3-5 repeats the spread says how far the median can be trusted."""
    if not s or s.get("median") is None:
        return "n/a"
    m = s["median"]
    if "min" in s and len(s["values"]) > 1:
        return "%s (%s–%s)" % (fmt_s(m), fmt_num(s["min"]), fmt_num(s["max"]))
    return fmt_s(m)


def fmt_num(x):
    return "%.3f" % x if x < 10 else "%.1f" % x


def fmt_s(x):
    return fmt_num(x) + " s"


def fmt_bytes(n):
    for unit, div in (("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return "%.2f %s" % (n / div, unit)
    return "%d B" % n


def ratio(kvc, llama):
    if kvc is None or llama is None or llama == 0:
        return "n/a"
    return "%.2fx" % (kvc / llama)


def mark(ok):
    return "yes" if ok else "**no**"


def rows(j):
    """(label, llama text, kvcodec text, kvcodec value, llama value, same-text note), in table order."""
    L, K = j["llama_server"], j["kvcodec"]
    out = []
    names = [("cold", "cold (recompute)"), ("repeat", "repeat without restart"), ("a_after_b", "A after B")]
    for key, label in names:
        lc, kc = L["cases"][key], K["cases"][key]
        out.append((label, secs(lc["ttft_s"]), secs(kc["ttft_s"]), kc["ttft_s"]["median"], lc["ttft_s"]["median"],
                    "%s / %s" % (mark(lc["same_text"]), mark(kc["same_text"]))))
    lr, kr = L["cases"]["restart"], K["cases"]["restart"]
    out.append(("repeat after restart: TTFT", secs(lr["ttft_s"]) + " after restore", secs(kr["ttft_s"]),
                kr["ttft_s"]["median"], lr["ttft_s"]["median"],
                "%s / %s" % (mark(lr["same_text"]), mark(kr["same_text"]))))
    # A llama-server client has to make the restore call before its request; kvcodec has no such call.
    with_restore = [a + b for a, b in zip(L["restore_call_s"]["values"], lr["ttft_s"]["values"])]
    wr = sorted(with_restore)
    med = wr[len(wr) // 2] if len(wr) % 2 else (wr[len(wr) // 2 - 1] + wr[len(wr) // 2]) / 2
    out.append(("repeat after restart, with the restore call",
                "%s (restore call %s)" % (secs({"median": med, "min": wr[0], "max": wr[-1], "values": wr}),
                                          fmt_s(L["restore_call_s"]["median"])),
                secs(kr["ttft_s"]), kr["ttft_s"]["median"], med, ""))
    lb, kb = L["bytes_on_disk"], K["bytes_on_disk"]
    out.append(("bytes on disk after A", fmt_bytes(lb["median"]) + " (slot file)",
                fmt_bytes(kb["median"]) + " (store dir)", kb["median"], lb["median"], ""))
    out.append(("bytes per prompt token", "%.0f B" % lb["per_prompt_token"], "%.0f B" % kb["per_prompt_token"],
                kb["per_prompt_token"], lb["per_prompt_token"], ""))
    for link in j["links"]:
        out.append(("restart, stored KV over %g Gbps" % link["gbps"],
                    secs(link["llama_server_ttft_s"]) + " computed", secs(link["kvcodec_ttft_s"]) + " measured",
                    link["kvcodec_ttft_s"]["median"], link["llama_server_ttft_s"]["median"],
                    "– / %s" % mark(link["kvcodec_same_text"])))
        fetched = link.get("kvcodec_fetched_bytes") or {}
        if fetched.get("median") is not None:
            slot = link["llama_server_link_bytes"]["median"]
            out.append(("bytes over the %g Gbps link" % link["gbps"], fmt_bytes(slot),
                        fmt_bytes(fetched["median"]) + " fetched", fetched["median"], slot, ""))
    return out


def render(j):
    L, K = j["llama_server"], j["kvcodec"]
    pa = j["prompts"]["A"]
    lines = []
    w = lines.append
    w("## kvcodec serve beside llama-server")
    w("")
    w("Time to first token (median of %d, range in brackets), measured by the client from sending a streamed "
      "`/v1/completions` request to the first event with text; prompt A is %s tokens (`%s`, characters %d-%d), "
      "%d tokens generated greedily, one llama.cpp thread and one slot on each server (flash attention: "
      "llama-server's default `-fa auto`; kvcodec serve %s); %s CPU(s), %s."
      % (j["settings"]["repeats"], pa.get("prompt_tokens_llama_server") or pa["tokens_kvcodec_tokenize"],
         pa["source"], pa["char_range"][0], pa["char_range"][1], j["settings"]["max_tokens"],
         "`--flash-attn`" if "--flash-attn" in (j["settings"].get("kvcodec_args") or "") else "without it",
         j["machine"]["nproc"], j["machine"]["cpu"] or "unknown CPU"))
    w("")
    w("| case | llama-server | kvcodec serve | kvcodec / llama-server | same text (llama-server / kvcodec) |")
    w("|---|---|---|---|---|")
    for label, lt, kt, kv, lv, same in rows(j):
        w("| %s | %s | %s | %s | %s |" % (label, lt, kt, ratio(kv, lv), same))
    w("")
    recompute = ", ".join("%s %s" % (name, fmt_s(j["links"][0]["recompute_ttft_s"][key]["median"]))
                          for name, key in (("llama-server", "llama_server"), ("kvcodec serve", "kvcodec"))) \
        if j["links"] else ""
    props = L.get("props") or {}
    if props.get("n_ctx_slot") is not None and props["n_ctx_slot"] != j["settings"]["ctx"]:
        w("llama-server's slot context is %d tokens (it caps -c %d at the model's training context)."
          % (props["n_ctx_slot"], j["settings"]["ctx"]))
    if recompute:
        w("Recompute at any link rate is the cold TTFT: %s." % recompute)
    w("Computed, not measured: llama-server's link rows, each %s per repeat (the slot file is local "
      "here; moving it over a link is what the formula adds). Every other number is measured."
      % ("`" + j["links"][0]["llama_server_ttft_s"]["formula"] + "`" if j["links"] else "slot bytes over the link"))
    w("\"Same text\": the %d generated tokens equal llama-server's first cold answer in every repeat." %
      j["settings"]["max_tokens"])
    if j.get("warnings"):
        w("")
        for msg in j["warnings"]:
            w("- warning: %s" % msg)
    w("")
    w("Command lines (first repeat; the others differ only in port and directory):")
    w("")
    w("```")
    for c in [L["command"]] + K["commands"][:2 + len(j["links"])]:
        w(portable(c))
    w("```")
    w("")
    v = j["versions"]
    dirty = ", tree dirty at run time" if v.get("kvcodec_git_dirty_at_run") else ""
    w("Versions: kvcodec %s (git %s%s), llama.cpp %s (node-llama-cpp %s), llama-server `%s`; run %s, %.0f s."
      % (v.get("kvcodec") or "?", (v.get("kvcodec_git") or "?")[:12], dirty,
         (v.get("llama_cpp_commit") or "?")[:12], v.get("node_llama_cpp") or "?",
         (v.get("llama_server") or "?").replace("\n", "; "), j["started"], j["elapsed_s"]))
    return "\n".join(lines) + "\n"


def portable(command):
    """A command line as a reader can run it: paths inside the repository relative to its root,
    the run's temporary folder as $WORK, llama.cpp's cache folder as $LLAMA_CPP, the port as PORT.
    (The commands hold no spaces inside a word: the bench writes them with shlex.join.)"""
    line = command.replace(REPO + os.sep, "")
    line = re.sub(r"/(?:[^/\s]+/)*bench-llama-server-[^/\s]+", "$WORK", line)
    line = re.sub(r"/(?:[^/\s]+/)*llama\.cpp-[^/\s]+/", "$LLAMA_CPP/", line)
    return re.sub(r"--port \d+", "--port PORT", line)


def svg_chart(j):
    """Grouped bars, log-scale seconds: two bars per case."""
    L, K = j["llama_server"], j["kvcodec"]
    cases = [("cold", L["cases"]["cold"]["ttft_s"]["median"], K["cases"]["cold"]["ttft_s"]["median"]),
             ("repeat", L["cases"]["repeat"]["ttft_s"]["median"], K["cases"]["repeat"]["ttft_s"]["median"]),
             ("A after B", L["cases"]["a_after_b"]["ttft_s"]["median"], K["cases"]["a_after_b"]["ttft_s"]["median"]),
             ("restart", L["cases"]["restart"]["ttft_s"]["median"] + L["restore_call_s"]["median"],
              K["cases"]["restart"]["ttft_s"]["median"])]
    for link in j["links"]:
        cases.append(("%g Gbps*" % link["gbps"], link["llama_server_ttft_s"]["median"],
                      link["kvcodec_ttft_s"]["median"]))
    vals = [v for _, a, b in cases for v in (a, b) if v and v > 0]
    lo = 10 ** math.floor(math.log10(min(vals)))
    hi = 10 ** math.ceil(math.log10(max(vals)))
    width, height, left, top, bottom = 120 + 110 * len(cases), 340, 60, 40, 60
    plot_h = height - top - bottom

    def y(v):
        return top + plot_h * (1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)))

    colors = {"llama-server": "#8c8c8c", "kvcodec serve": "#1f77b4"}
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13">Time to first token, median (s, log scale); '
           '* llama-server computed</text>' % left]
    decade = lo
    while decade <= hi * 1.0001:
        yd = y(decade)
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, width - 10, yd, yd))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (left - 4, y(decade) + 4, decade))
        decade *= 10
    for i, (label, a, b) in enumerate(cases):
        x0 = left + 20 + i * 110
        for k, (name, v) in enumerate((("llama-server", a), ("kvcodec serve", b))):
            if not v or v <= 0:
                continue
            x = x0 + k * 40
            out.append('<rect x="%d" y="%.1f" width="36" height="%.1f" fill="%s"><title>%s %s: %.3f s</title></rect>'
                       % (x, y(v), top + plot_h - y(v), colors[name], name, label, v))
            out.append('<text x="%d" y="%.1f" text-anchor="middle" font-size="9">%.2f</text>' % (x + 18, y(v) - 3, v))
        out.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (x0 + 38, top + plot_h + 16, label))
    for k, (name, c) in enumerate(colors.items()):
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (left + k * 130, height - 22, c))
        out.append('<text x="%d" y="%d">%s</text>' % (left + 16 + k * 130, height - 12, name))
    out.append("</svg>")
    return "\n".join(out) + "\n"


SECTION_BEGIN = "<!-- scripts/results_llama_server.sh: from here -->"
SECTION_END = "<!-- scripts/results_llama_server.sh: to here -->"


def results_section(page):
    """docs/results.md's section for the comparison, made from docs/results-llama-server.md's text
    (`page`): its tables under one heading, the chart, and a link to the page for the rest."""
    body = page.split("\n## ", 1)[1] if "\n## " in page else ""
    body = "### " + body.replace("\n## ", "\n### ")
    return "\n".join([
        SECTION_BEGIN,
        "## Reuse beside llama.cpp's own llama-server (kvtiny)",
        "",
        "From `scripts/results_llama_server.sh` ([results-llama-server.md](results-llama-server.md), which it "
        "writes, has the command lines and versions).",
        "",
        "![time to first token, kvcodec serve beside llama-server](img/llama_server.svg)",
        "",
        body.rstrip(),
        SECTION_END,
        "",
    ])


def splice(path, section):
    """Puts `section` in place of the one between the markers in `path` (at the end if none)."""
    with open(path) as f:
        text = f.read()
    if SECTION_BEGIN in text and SECTION_END in text:
        head, rest = text.split(SECTION_BEGIN, 1)
        tail = rest.split(SECTION_END, 1)[1].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", nargs="?", help="scripts/bench_llama_server.py's output")
    p.add_argument("--svg", help="also write a bar chart of the TTFTs here")
    p.add_argument("--splice", nargs=2, metavar=("PAGE", "RESULTS"),
                   help="instead: put PAGE's tables (docs/results-llama-server.md) into RESULTS' section "
                        "(docs/results.md)")
    a = p.parse_args()
    if a.splice:
        with open(a.splice[0]) as f:
            splice(a.splice[1], results_section(f.read()))
        return
    if not a.json:
        p.error("the benchmark's JSON is needed")
    with open(a.json) as f:
        j = json.load(f)
    sys.stdout.write(render(j))
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg_chart(j))


if __name__ == "__main__":
    main()
