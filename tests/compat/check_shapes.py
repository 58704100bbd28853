#!/usr/bin/env python3
"""ctest compat.llama_server_shapes: `kvcodec serve` started with llama-server's command line
answers what issue 40 names the way llama-server does, held against llama-server's recorded
shapes (llama_server_shapes.json, written by scripts/compat_llama_server.py --record), so the
suite needs no llama-server.

  check_shapes.py KVCODEC_BINARY MODEL

Fails when kvcodec serve refuses the llama-server flags, lacks a named endpoint, or lacks a
required field (timings on /completion; id_slot, filename, n_saved / n_restored and timings of
the slot save/restore answers; the model object of /v1/models/{id}); a wrong or missing API key
from --api-key-file must be refused with 401. Other differences are printed, not failed.
"""

import os
import shutil
import signal
import sys
import tempfile

import llama_server_shapes as shapes
from bench_llama_server import on_sigterm  # importable once llama_server_shapes has set the path


def describe(item):
    if isinstance(item, dict):  # a type mismatch
        return "%s (llama-server %s, kvcodec %s)" % (item["path"], item["llama_server"], item["kvcodec"])
    return item


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    kvcodec, model = sys.argv[1], os.path.abspath(sys.argv[2])
    recorded = shapes.load_snapshot()
    llama = recorded["results"]
    work = tempfile.mkdtemp(prefix="compat-shapes-")
    try:
        values = {"model": model, "key_file": os.path.join(work, "api-keys.txt"),
                  "slot_dir": os.path.join(work, "slots")}
        with open(values["key_file"], "w") as f:
            f.write(shapes.API_KEY + "\n")
        os.makedirs(values["slot_dir"])
        os.environ["KVCODEC_STORE"] = os.path.join(work, "store")  # not the user's default store
        argv = shapes.llama_command_line(values)
        srv, tail = shapes.start_server("kvcodec", [kvcodec, "serve"], argv, os.path.join(work, "kvcodec.log"))
        if srv is None:
            print("FAIL kvcodec serve does not start with llama-server's flags:\n%s" % tail)
            return 1
        try:
            got = shapes.run_probes(srv.port)
        finally:
            srv.stop()
        failures = 0
        for probe in shapes.PROBES:
            why = shapes.required_failures(probe, llama, got.get(probe["name"]))
            for w in why:
                print("FAIL %s: %s" % (probe["name"], w))
            failures += len(why)
            d = shapes.differences(probe, llama, got.get(probe["name"], {}))
            listed = [k for k in ("missing", "added", "type_mismatch") if d.get(k)]
            if not why and (listed or d["status_mismatch"]):
                print("note %s: HTTP %s (llama-server %s)%s" % (
                    probe["name"], d["kvcodec_status"], d["llama_server_status"],
                    "".join("; %s: %s" % (k, ", ".join(describe(x) for x in d[k][:8])) for k in listed)))
        print("%d required check(s) failed against llama-server %s" % (failures, recorded.get("llama_server", "?")))
        return 1 if failures else 0
    finally:
        shapes.Server.stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    # SystemExit on a signal: main's finally stops the server.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_sigterm)
    sys.exit(main())
