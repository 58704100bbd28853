#!/usr/bin/env python3
"""Can a llama-server user switch to `kvcodec serve` by changing the binary's name? (issue 40)

Starts llama.cpp's own llama-server (built from the pinned bundle) and `kvcodec serve` with the
same llama-server command line,

  -m MODEL -c 2048 -np 2 -t 1 --api-key-file FILE --jinja --slot-save-path DIR --host 127.0.0.1 --port P

first one named flag at a time (beside --model and --host) to see which flags each binary starts
with, then all of them at once. Both servers then get the same requests (the list is
tests/compat/llama_server_shapes.py's PROBES: the native /completion, /props, /slots and its
save/restore/erase actions, /apply-template, the OpenAI routes with and without /v1, /tokenize,
error cases) and their answers are compared by status and JSON shape. llama-server answers
/v1/embeddings only when started with --embeddings, so a second llama-server with that flag gives
the shape an embedding has.

Writes results/compat-llama-server/report.json and docs/compat-llama-server.md; with --record also
tests/compat/llama_server_shapes.json, the llama-server shapes the suite test
tests/compat/check_shapes.py holds kvcodec serve to without a llama-server. Exits 1 when kvcodec
serve refuses a named flag, lacks a named endpoint (404/405, or an error where llama-server
answers 2xx), or lacks `timings` on /completion or a field of the slot save/restore answers;
every other difference is listed, not failed.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "compat"))

import llama_server_shapes as shapes  # noqa: E402  (path set just above)
from bench_llama_server import BenchError, Server, find_llama_server, log, on_sigterm, versions  # noqa: E402

DEFAULT_KVCODEC = os.path.join(REPO, "build/dev/tools/kvcodec/kvcodec")
DEFAULT_MODEL = os.path.join(REPO, "models/kvtiny/kvtiny.gguf")
EXAMPLE_CHARS = 900


def example(text):
    """A response as it came, cut in the middle when long (a stream's last event holds timings)."""
    if text is None or len(text) <= EXAMPLE_CHARS:
        return text
    return text[:EXAMPLE_CHARS - 350] + " [...] " + text[-350:]


def check_flags(name, command, values, work):
    """Which of the named flags `command` starts with: each beside --model and --host alone, then
    all of them together (the line the comparison uses)."""
    base = ["--model", values["model"], "--host", "127.0.0.1"]
    cases = [(flag, shapes.fill(argv, values) + ["--host", "127.0.0.1"] if flag == "-m" else
              base + shapes.fill(argv, values)) for flag, argv in shapes.NAMED_FLAGS]
    cases.append(("--embeddings", base + ["--embeddings"]))
    out = {}
    for i, (flag, argv) in enumerate(cases):
        log("%s %s" % (name, " ".join(argv[len(base):] if flag != "-m" else argv[:2])))
        srv, tail = shapes.start_server(name, command, argv, os.path.join(work, "%s-flag%d.log" % (name, i)), 30.0)
        out[flag] = {"starts": srv is not None, "argv": argv}
        if srv is None:
            out[flag]["log_tail"] = tail
        else:
            srv.stop()
    return out


def probe_server(name, command, argv, work, probes=None):
    srv, tail = shapes.start_server(name, command, argv, os.path.join(work, name + ".log"))
    if srv is None:
        return None, tail
    try:
        log("%s up on port %d: probing" % (name, srv.port))
        return shapes.run_probes(srv.port, probes, log), ""
    finally:
        srv.stop()


def kvcodec_native_line(values):
    """kvcodec serve's own spelling of the llama-server line, for probing its endpoints while it
    still refuses the llama-server flags: the endpoint list is then not empty for that reason alone."""
    return ["--model", values["model"], "--ctx", shapes.CTX, "--parallel", shapes.SLOTS, "--threads", "1",
            "--api-key", shapes.API_KEY, "--host", "127.0.0.1"]


def build_report(args, work, llama, kv, flags, kv_line, kv_start_tail):
    failures, endpoints = [], []
    for flag, _ in shapes.NAMED_FLAGS:
        if not flags["kvcodec serve"][flag]["starts"]:
            failures.append("flag %s: kvcodec serve does not start with it" % flag)
    if kv_line != "llama-server line":
        failures.append("kvcodec serve does not start with the llama-server command line")
    for probe in shapes.PROBES:
        got = kv.get(probe["name"]) if kv is not None else None
        why = shapes.required_failures(probe, llama, got)
        failures.extend("%s: %s" % (probe["name"], w) for w in why)
        ref = llama.get(probe["name"], {})
        endpoints.append({
            "name": probe["name"], "named": bool(probe.get("named")), "required_failures": why,
            "differences": shapes.differences(probe, llama, got or {}),
            "reference_shape": shapes.reference_shape(probe, llama) if probe.get("named") else None,
            "required_paths": shapes.required_paths(probe, llama),
            "reference": probe.get("reference"),
            "example_llama_server": example(ref.get("text")),
            "example_kvcodec": example((got or {}).get("text")),
        })
    emb = llama.get(shapes.EMBEDDINGS_PROBE["name"], {})
    return {
        "schema": "kvcodec-compat-llama-server/1",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(args),
        "command_line": "-m MODEL " + " ".join(shapes.llama_command_line(
            {"model": "MODEL", "key_file": "KEY_FILE", "slot_dir": "SLOT_DIR"})[2:]) + " --port P",
        "work": work,
        "kvcodec_probed_with": kv_line,
        "kvcodec_start_log": kv_start_tail,
        "flags": flags,
        "endpoints": endpoints,
        "llama_server_embeddings": {"status": emb.get("status"), "example": example(emb.get("text"))},
        "failures": failures,
    }


def cell(ok):
    return "yes" if ok else "**no**"


def short_list(items, limit=12):
    items = list(items)
    if len(items) <= limit:
        return ", ".join("`%s`" % i for i in items)
    return ", ".join("`%s`" % i for i in items[:limit]) + " and %d more" % (len(items) - limit)


def render_markdown(report):
    v = report["versions"]
    lines = [
        "# kvcodec serve beside llama-server: flags and endpoints",
        "",
        "Generated by `scripts/compat_llama_server.sh` (do not edit by hand) on %s: llama-server (%s, "
        "node-llama-cpp %s) and kvcodec serve %s (git %s), both started with" % (
            report["date"][:10], (v.get("llama_server") or "?").splitlines()[0], v.get("node_llama_cpp"),
            (v.get("kvcodec") or "?").splitlines()[0], (v.get("kvcodec_git") or "?")[:12]),
        "",
        "    " + report["command_line"],
        "",
        "and sent the same requests. A named flag or endpoint (issue 40) that kvcodec serve lacks fails "
        "the script; other differences are listed. Shapes: key sets and value types, arrays by their "
        "elements' merged shape, streams by their data events' merged shape.",
        "",
    ]
    if report["kvcodec_probed_with"] != "llama-server line":
        lines += ["kvcodec serve did not start with that line; its endpoints were probed with its own "
                  "flags (`%s`). Its error:" % " ".join(report["kvcodec_probed_with"]), "",
                  "    " + "\n    ".join([ln for ln in (report["kvcodec_start_log"] or "").splitlines() if ln][-2:]),
                  ""]
    lines += ["## Flags", "", "| flag | llama-server starts | kvcodec serve starts |", "|---|---|---|"]
    for flag, r in report["flags"]["llama-server"].items():
        named = flag in dict(shapes.NAMED_FLAGS)
        lines.append("| `%s`%s | %s | %s |" % (flag, "" if named else " (not named)", cell(r["starts"]),
                                              cell(report["flags"]["kvcodec serve"][flag]["starts"])))
    lines += ["", "## Endpoints", "",
              "| request | named | llama-server | kvcodec serve | verdict |", "|---|---|---|---|---|"]
    for e in report["endpoints"]:
        d = e["differences"]
        verdict = "; ".join(e["required_failures"]) if e["required_failures"] else (
            "ok" if not d.get("status_mismatch") else "status differs (listed)")
        lines.append("| `%s` | %s | %s | %s | %s |" % (e["name"], "yes" if e["named"] else "", d["llama_server_status"],
                                                     d["kvcodec_status"], verdict))
    lines += ["", "## Key differences", "",
              "Per request where both answered 2xx, or the same error status: keys llama-server has that "
              "kvcodec serve lacks, keys kvcodec serve adds, and type mismatches.", ""]
    any_diff = False
    for e in report["endpoints"]:
        d = e["differences"]
        parts = []
        if d.get("missing"):
            parts.append("- lacks: " + short_list(d["missing"], 40))
        if d.get("added"):
            parts.append("- adds: " + short_list(d["added"], 40))
        if d.get("type_mismatch"):
            parts.append("- types: " + ", ".join("`%s` %s vs %s" % (m["path"], m["llama_server"], m["kvcodec"])
                                                for m in d["type_mismatch"]))
        stream = d.get("stream")
        if stream and stream["kvcodec"].get("sse") and (
                stream["llama_server"].get("done_marker") != stream["kvcodec"].get("done_marker")):
            parts.append("- stream ends with `data: [DONE]`: llama-server %s, kvcodec serve %s" % (
                stream["llama_server"].get("done_marker"), stream["kvcodec"].get("done_marker")))
        ref = e.get("reference_shape")
        if ref is not None and not 200 <= (d["kvcodec_status"] or 0) < 300:
            # GET /slots answers an array of slot objects: their keys, as "[].id".
            prefix, obj = ("[].", ref[0]) if isinstance(ref, list) and ref else ("", ref)
            top = ["%s%s (%s)" % (prefix, k, shapes.type_name(v)) for k, v in obj.items()] if isinstance(
                obj, dict) else [shapes.type_name(ref)]
            source = ""
            if e["reference"]:
                name, sub = e["reference"]
                source = " (of `%s`%s)" % (name, " " + sub if sub else "")
            parts.append("- kvcodec serve gave no answer to compare; llama-server's keys%s: %s" % (
                source, short_list(top, 60)))
            if e["required_paths"]:
                parts.append("- required: " + short_list(e["required_paths"], 60))
        if parts:
            any_diff = True
            lines += ["### `%s`" % e["name"], ""] + parts + [""]
    if not any_diff:
        lines += ["None.", ""]
    lines += ["## Verdict", ""]
    lines += ["- " + f for f in report["failures"]] if report["failures"] else [
        "kvcodec serve has every named flag and endpoint."]
    # The doc is committed: no path of this machine or this run in it.
    text = "\n".join(lines) + "\n"
    return text.replace(report["work"], "WORK").replace(REPO + "/", "")


def snapshot(report_llama, version):
    keep = ("status", "content_type", "sse", "done_marker", "shape")
    return {
        "schema": "kvcodec-llama-server-shapes/1",
        "llama_server": version,
        "written_by": "scripts/compat_llama_server.py --record",
        "results": {name: {k: r[k] for k in keep if k in r} for name, r in report_llama.items()},
    }


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--kvcodec", default=DEFAULT_KVCODEC, help="kvcodec binary")
    p.add_argument("--llama-server", help="llama-server binary (default: scripts/setup-llama-server.sh's)")
    p.add_argument("--out", default=os.path.join(REPO, "results/compat-llama-server/report.json"))
    p.add_argument("--doc", default=os.path.join(REPO, "docs/compat-llama-server.md"))
    p.add_argument("--record", action="store_true", help="also write " + os.path.relpath(shapes.SNAPSHOT, REPO))
    p.add_argument("--work", help="work directory (kept; default: a temporary one, removed at the end)")
    return p.parse_args()


def main():
    args = parse_args()
    if not os.access(args.kvcodec, os.X_OK):
        raise BenchError("kvcodec not found at %s: build kvcodec_cli or pass --kvcodec" % args.kvcodec)
    if not args.llama_server:
        args.llama_server = find_llama_server()
    own_work = args.work is None
    work = tempfile.mkdtemp(prefix="compat-llama-server-") if own_work else os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    try:
        values = {"model": os.path.abspath(args.model), "key_file": os.path.join(work, "api-keys.txt")}
        with open(values["key_file"], "w") as f:
            f.write(shapes.API_KEY + "\n")
        # Each server saves its slots in a directory of its own, and kvcodec's chunk store is a
        # fresh one inside the work directory (not the user's default store).
        dirs = {n: os.path.join(work, n) for n in ("llama-slots", "kvcodec-slots", "kvcodec-store")}
        for d in dirs.values():
            os.makedirs(d, exist_ok=True)
        os.environ["KVCODEC_STORE"] = dirs["kvcodec-store"]
        kvcodec = [args.kvcodec, "serve"]
        llama_values = dict(values, slot_dir=dirs["llama-slots"])
        kv_values = dict(values, slot_dir=dirs["kvcodec-slots"])

        flags = {"llama-server": check_flags("llama-server", [args.llama_server], llama_values, work),
                 "kvcodec serve": check_flags("kvcodec", kvcodec, kv_values, work)}

        llama_line = shapes.llama_command_line(llama_values)
        llama, tail = probe_server("llama-server", [args.llama_server], llama_line, work)
        if llama is None:
            raise BenchError("llama-server would not start with %s:\n%s" % (" ".join(llama_line), tail))
        emb, _ = probe_server("llama-server-embeddings", [args.llama_server],
                              llama_line + ["--embeddings", "--pooling", "mean"], work,
                              [p for p in shapes.PROBES if p["path"] == "/v1/models"] + [shapes.EMBEDDINGS_PROBE])
        llama.update({shapes.EMBEDDINGS_PROBE["name"]: (emb or {}).get(shapes.EMBEDDINGS_PROBE["name"], {})})

        kv, kv_tail = probe_server("kvcodec", kvcodec, shapes.llama_command_line(kv_values), work)
        kv_line = "llama-server line"
        if kv is None:
            kv_line = kvcodec_native_line(kv_values)
            log("kvcodec serve refused the llama-server line; probing it with %s" % " ".join(kv_line))
            kv, _ = probe_server("kvcodec-native", kvcodec, kv_line, work)

        report = build_report(args, work, llama, kv, flags, kv_line, kv_tail)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        with open(args.doc, "w") as f:
            f.write(render_markdown(report))
        log("wrote %s and %s" % (args.out, args.doc))
        if args.record:
            with open(shapes.SNAPSHOT, "w") as f:
                json.dump(snapshot(llama, report["versions"].get("llama_server")), f, indent=1, sort_keys=True)
                f.write("\n")
            log("recorded llama-server's shapes in %s" % shapes.SNAPSHOT)
    finally:
        Server.stop_all()
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    for failure in report["failures"]:
        print("MISSING " + failure, file=sys.stderr)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    # on_sigterm turns the signal into SystemExit, so main's finally stops the servers.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_sigterm)
    try:
        sys.exit(main())
    except BenchError as e:
        print("compat_llama_server: %s" % e, file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
