#!/usr/bin/env python3
"""Side-by-side time to first token of `kvcodec serve` and llama.cpp's own llama-server.

Both servers run the same GGUF, the same two prompts (about 1,450 tokens each, cut from the
model's held-out text), one llama.cpp thread and one slot, and answer the same streamed
/v1/completions requests (greedy, --max-tokens tokens). Cases, each a median of --repeats:

  cold                    a fresh server with nothing cached or stored, prompt A
  repeat without restart  A again on the same server
  A after B               B, then A (is A still reusable once another prompt ran?)
  repeat after restart    llama-server: slot saved to a file, server restarted, slot restored
                          (timed on its own), then A; kvcodec: server restarted on the same store
  bytes on disk           llama-server's slot file; kvcodec's store directory after A once
  link rates              kvcodec with --link-gbps R (the link declared, so its store holds what
                          that link's readers fetch): A stored, server restarted, A (measured); llama-server's
                          slot file moved over the same link is COMPUTED: bytes*8/R + the
                          measured restore call + the measured TTFT after the restore

TTFT is measured by the client (here): from sending the request to the first server-sent event
with non-empty text, so both servers are timed by the same clock and the same definition.

Only the two servers' command lines, kvcodec's /metrics and the OpenAI response format are relied
on, so the script keeps working while kvcodec serve changes underneath it.

Writes JSON to --out (default stdout); progress goes to stderr. scripts/render_llama_server.py
turns the JSON into a markdown table.
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_KVCODEC = os.path.join(REPO, "build/release/tools/kvcodec/kvcodec")
DEFAULT_MODEL = os.path.join(REPO, "models/kvtiny/kvtiny.gguf")
SLOT_FILE = "a.bin"

STARTED = time.monotonic()


def log(msg):
    print("[bench-llama-server %6.1fs] %s" % (time.monotonic() - STARTED, msg), file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


def summary(values):
    """Median with every value kept: a median of 3-5 hides one slow run, the list shows it."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "values": values}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": values}


def free_port():
    # Asking the kernel for a free port and handing it on leaves a short race with other
    # programs; a server that fails to bind is retried on a new port (Server.start).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dir_bytes(path):
    total = files = 0
    for root, _, names in os.walk(path):
        for n in names:
            st = os.lstat(os.path.join(root, n))
            total += st.st_size
            files += 1
    return total, files


def bytes_by_suffix(path):
    """Store bytes grouped by what follows the first dot of each file name: kvcodec's embedded
    store names objects by key and kind (manifest, one file per codec level it keeps), so this
    shows which levels take the room. Only labels: a change of layout changes the keys, nothing else."""
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            kind = n.split(".", 1)[1] if "." in n else "(none)"
            out[kind] = out.get(kind, 0) + os.lstat(os.path.join(root, n)).st_size
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------------------------------
# Servers


class Server:
    """One server process: started in its own session so a Ctrl-C at the terminal reaches only
    this script, which then stops every server it started (LIVE) before exiting."""

    LIVE = set()

    def __init__(self, name, argv_for_port, log_path):
        self.name = name
        self.argv_for_port = argv_for_port
        self.log_path = log_path
        self.proc = None
        self.port = None
        self.argv = None

    def start(self, ready_timeout=120.0):
        for attempt in range(3):
            self.port = free_port()
            self.argv = self.argv_for_port(self.port)
            logf = open(self.log_path, "ab")
            logf.write(("\n$ %s\n" % shlex.join(self.argv)).encode())
            logf.flush()
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            logf.close()
            Server.LIVE.add(self)
            if self._wait_ready(ready_timeout):
                return self
            self.stop()
            log("%s did not come up on port %d (attempt %d); log tail:\n%s" %
                (self.name, self.port, attempt + 1, self.log_tail()))
        raise BenchError("%s would not start; see %s" % (self.name, self.log_path))

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                status, _ = http_get(self.port, "/health", timeout=2)
                # llama-server answers 503 while it loads the model, 200 once it can serve.
                if status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                log("%s ignored SIGTERM for 15 s; killing it" % self.name)
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        Server.LIVE.discard(self)
        self.proc = None

    def log_tail(self, n=20):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    @classmethod
    def stop_all(cls):
        for s in list(cls.LIVE):
            s.stop()


def http_get(port, path, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def http_post_json(port, path, body, timeout=300):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = data.decode(errors="replace")
        return resp.status, parsed
    finally:
        conn.close()


def stream_completion(port, prompt, max_tokens, extra=None, timeout=600):
    """One streamed completion, timed from the request's first byte to the first event carrying
    text. The events are read line by line as they arrive (HTTPResponse.readline undoes the
    chunked encoding without waiting for more than a line), so the time is the arrival time."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    body.update(extra or {})
    payload = json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.connect()  # the TCP handshake is not the server's time to first token
    out = {"ttft_s": None, "first_event_s": None, "text": "", "events": 0, "usage": None, "timings": None,
           "finish_reason": None}
    try:
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json",
                                                          "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise BenchError("POST /v1/completions on port %d: HTTP %d: %s" %
                             (port, resp.status, resp.read()[:500].decode(errors="replace")))
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            now = time.perf_counter() - t0
            ev = json.loads(data)
            if "error" in ev:
                raise BenchError("server error event: %s" % json.dumps(ev["error"])[:500])
            out["events"] += 1
            for c in ev.get("choices") or []:
                if out["first_event_s"] is None:
                    out["first_event_s"] = now
                piece = c.get("text")
                if piece is None:
                    piece = (c.get("delta") or {}).get("content") or ""
                if piece and out["ttft_s"] is None:
                    out["ttft_s"] = now
                out["text"] += piece
                if c.get("finish_reason"):
                    out["finish_reason"] = c["finish_reason"]
            if ev.get("usage"):
                out["usage"] = ev["usage"]
            if ev.get("timings"):
                out["timings"] = ev["timings"]
        out["total_s"] = time.perf_counter() - t0
    finally:
        conn.close()
    usage = out["usage"] or {}
    out["prompt_tokens"] = usage.get("prompt_tokens")
    out["completion_tokens"] = usage.get("completion_tokens")
    details = usage.get("prompt_tokens_details") or {}
    out["cached_tokens"] = details.get("cached_tokens")
    if out["ttft_s"] is None:
        # Nothing but empty pieces (e.g. max_tokens 0): the first choice event stands in.
        out["ttft_s"] = out["first_event_s"]
    return out


def metrics(port):
    """kvcodec's /metrics as {name{labels}: value}; unparsable lines are skipped."""
    status, body = http_get(port, "/metrics")
    if status != 200:
        return {}
    out = {}
    for line in body.decode(errors="replace").splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            pass
    return out


STORE_QUEUE = 'kvcodec_queue_length{queue="store"}'
STORED_BYTES = "kvcodec_stored_bytes_total"


def wait_store_idle(server, store_dir, timeout=180.0, quiet_s=0.5):
    """Waits until kvcodec has written everything it means to store: its store queue gauge is 0
    and neither its stored-bytes counter nor the store directory has changed for quiet_s (the
    gauge alone can read 0 just before a finished request's store job is queued). Without the
    gauge (a renamed metric) the quiet period alone decides."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        m = metrics(server.port)
        state = (m.get(STORE_QUEUE, 0.0), m.get(STORED_BYTES), dir_bytes(store_dir))
        if state != last:
            last, since = state, time.monotonic()
        elif state[0] == 0 and time.monotonic() - since >= quiet_s:
            return {"stored_bytes_total": state[1], "store_queue_gauge_seen": STORE_QUEUE in m}
        time.sleep(0.05)
    raise BenchError("kvcodec's store did not go idle within %.0f s (last %r)" % (timeout, last))


# ---------------------------------------------------------------------------------------------
# Prompts


def count_tokens(kvcodec, model, text, tmpdir):
    path = os.path.join(tmpdir, "tokenize.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    res = subprocess.run([kvcodec, "tokenize", path, "--model", model], capture_output=True, text=True)
    if res.returncode != 0:
        raise BenchError("kvcodec tokenize failed: %s" % res.stderr.strip())
    return len(res.stdout.split())


def cut_prompt(kvcodec, model, text, start, target, tmpdir):
    """The longest run of whole words from `start` (moved to a line start) whose token count,
    BOS included, is at most `target`: a binary search over word ends, a tokenize call each."""
    nl = text.find("\n", start)
    start = nl + 1 if nl >= 0 and start > 0 else start
    window = text[start:start + target * 12]
    ends = [i for i, ch in enumerate(window) if ch in " \n"]
    lo, hi = 0, len(ends) - 1
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        n = count_tokens(kvcodec, model, window[:ends[mid]], tmpdir)
        if n <= target:
            best = (ends[mid], n)
            lo = mid + 1
        else:
            hi = mid - 1
    if best is None:
        raise BenchError("no prompt of at most %d tokens at offset %d" % (target, start))
    end, n = best
    return {"text": window[:end], "char_range": [start, start + end], "tokens_kvcodec_tokenize": n}


# ---------------------------------------------------------------------------------------------
# The two benchmarks


def counters(port):
    return {k: v for k, v in metrics(port).items() if "_bucket{" not in k}


def request(server, prompt, args, label, extra=None, with_metrics=False):
    """One timed request; with_metrics adds what changed in kvcodec's /metrics meanwhile (fetched
    bytes, reuse hits by tier, ...): which path served it, without knowing the server's insides."""
    before = counters(server.port) if with_metrics else None
    r = stream_completion(server.port, prompt, args.max_tokens, extra)
    if with_metrics:
        after = counters(server.port)
        r["metrics_delta"] = {k: v - before.get(k, 0.0) for k, v in after.items()
                              if v != before.get(k, 0.0) and "queue_length" not in k}
    log("  %-28s ttft %7.3f s  total %7.3f s  prompt %s cached %s" %
        (label, r["ttft_s"], r["total_s"], r["prompt_tokens"], r["cached_tokens"]))
    return r


def llama_props(srv):
    """What llama-server made of its flags (GET /props): it caps a slot's context at the model's
    training context, for one, whatever -c says."""
    try:
        status, body = http_get(srv.port, "/props")
        j = json.loads(body) if status == 200 else {}
    except (OSError, ValueError):
        return None
    gen = j.get("default_generation_settings") or {}
    return {"n_ctx_slot": gen.get("n_ctx"), "total_slots": j.get("total_slots"), "build_info": j.get("build_info")}


def run_llama_server(args, prompts, work):
    """llama-server's own reuse: its in-memory slot (and --cache-ram prompt cache, on by default
    in this version), and its slot save/restore files for a restart."""
    A, B = prompts["A"]["text"], prompts["B"]["text"]
    extra = {"cache_prompt": True}
    runs = {k: [] for k in ("cold", "repeat", "a_after_b", "restart")}
    save_calls, restore_calls, slot_bytes, restore_s = [], [], [], []
    commands = []
    props = None
    for i in range(args.repeats):
        slots = os.path.join(work, "llama-slots-%d" % i)
        shutil.rmtree(slots, ignore_errors=True)
        os.makedirs(slots)

        def argv(port, slots=slots):
            return ([args.llama_server, "-m", args.model, "-t", "1", "-tb", "1", "-np", "1", "-c", str(args.ctx),
                     "--slot-save-path", slots, "--host", "127.0.0.1", "--port", str(port)] +
                    shlex.split(args.llama_server_args))

        log("llama-server repeat %d/%d" % (i + 1, args.repeats))
        srv = Server("llama-server", argv, os.path.join(work, "llama-server.log")).start()
        commands.append(shlex.join(srv.argv))
        if props is None:
            props = llama_props(srv)
        runs["cold"].append(request(srv, A, args, "cold A", extra))
        runs["repeat"].append(request(srv, A, args, "repeat A (no restart)", extra))
        request(srv, B, args, "B", extra)
        runs["a_after_b"].append(request(srv, A, args, "A after B", extra))
        # The slot now holds A (and the tokens generated after it): what a restart must bring back.
        status, body = http_post_json(srv.port, "/slots/0?action=save", {"filename": SLOT_FILE})
        if status != 200:
            raise BenchError("slot save: HTTP %d: %s" % (status, body))
        save_calls.append(body)
        slot_bytes.append(os.path.getsize(os.path.join(slots, SLOT_FILE)))
        srv.stop()

        srv = Server("llama-server", argv, os.path.join(work, "llama-server.log")).start()
        commands.append(shlex.join(srv.argv))
        t0 = time.perf_counter()
        status, body = http_post_json(srv.port, "/slots/0?action=restore", {"filename": SLOT_FILE})
        restore_s.append(time.perf_counter() - t0)
        if status != 200:
            raise BenchError("slot restore: HTTP %d: %s" % (status, body))
        restore_calls.append(body)
        log("  slot file %d bytes, restore call %.3f s" % (slot_bytes[-1], restore_s[-1]))
        runs["restart"].append(request(srv, A, args, "A after restart+restore", extra))
        srv.stop()
    return {
        "commands": commands,
        "runs": runs,
        "slot_file_bytes": summary(slot_bytes),
        "restore_call_s": summary(restore_s),
        "save_responses": save_calls,
        "restore_responses": restore_calls,
        "props": props,
    }


def run_kvcodec(args, prompts, work):
    A, B = prompts["A"]["text"], prompts["B"]["text"]
    runs = {k: [] for k in ("cold", "repeat", "a_after_b", "restart")}
    links = {r: [] for r in args.link_gbps}
    link_bytes = {r: [] for r in args.link_gbps}
    store_bytes, store_files, stored_counter, store_kinds = [], [], [], []
    commands = []
    for i in range(args.repeats):
        store = os.path.join(work, "kvcodec-store-%d" % i)
        shutil.rmtree(store, ignore_errors=True)
        os.makedirs(store)

        def argv_for(link, store_dir=store):
            def argv(port):
                cmd = [args.kvcodec, "serve", "--model", args.model, "--store", "dir://" + store_dir, "--threads", "1",
                       "--parallel", "1", "--fetch-threads", "1", "--ctx", str(args.ctx), "--host", "127.0.0.1",
                       "--port", str(port)] + shlex.split(args.kvcodec_args)
                if link is not None:
                    cmd += ["--link-gbps", repr(link)]
                return cmd
            return argv

        log("kvcodec serve repeat %d/%d" % (i + 1, args.repeats))
        logp = os.path.join(work, "kvcodec.log")
        srv = Server("kvcodec serve", argv_for(None), logp).start()
        commands.append(shlex.join(srv.argv))
        runs["cold"].append(request(srv, A, args, "cold A", with_metrics=True))
        idle = wait_store_idle(srv, store)
        b, n = dir_bytes(store)
        store_bytes.append(b)
        store_files.append(n)
        store_kinds.append(bytes_by_suffix(store))
        stored_counter.append(idle["stored_bytes_total"])
        log("  store after A: %d bytes in %d files" % (b, n))
        runs["repeat"].append(request(srv, A, args, "repeat A (no restart)", with_metrics=True))
        request(srv, B, args, "B")
        runs["a_after_b"].append(request(srv, A, args, "A after B", with_metrics=True))
        wait_store_idle(srv, store)
        srv.stop()

        srv = Server("kvcodec serve", argv_for(None), logp).start()
        commands.append(shlex.join(srv.argv))
        runs["restart"].append(request(srv, A, args, "A after restart", with_metrics=True))
        wait_store_idle(srv, store)
        srv.stop()

        # A deployment behind a slow link declares it (--link-gbps): its store is filled by a server
        # that knows the link, so it holds the rungs that link's readers fetch.
        for rate in args.link_gbps:
            link_store = os.path.join(work, "kvcodec-store-%d-link-%g" % (i, rate))
            shutil.rmtree(link_store, ignore_errors=True)
            os.makedirs(link_store)
            fill = Server("kvcodec serve", argv_for(rate, link_store), logp).start()
            commands.append(shlex.join(fill.argv))
            request(fill, A, args, "cold A @%g Gbps (fills the store)" % rate)
            wait_store_idle(fill, link_store)
            fill.stop()
            link_bytes[rate].append(dir_bytes(link_store)[0])
            srv = Server("kvcodec serve", argv_for(rate, link_store), logp).start()
            commands.append(shlex.join(srv.argv))
            links[rate].append(request(srv, A, args, "A after restart @%g Gbps" % rate, with_metrics=True))
            wait_store_idle(srv, link_store)
            srv.stop()
    return {
        "commands": commands,
        "runs": runs,
        "links": {repr(r): v for r, v in links.items()},
        "link_store_bytes_after_a": {repr(r): summary(v) for r, v in link_bytes.items()},
        "store_bytes_after_a": summary(store_bytes),
        "store_files_after_a": store_files,
        "store_bytes_by_kind_after_a": store_kinds,
        "stored_bytes_counter_after_a": stored_counter,
    }


# ---------------------------------------------------------------------------------------------
# Summaries


def case_summary(runs, reference_text):
    for r in runs:
        r["same_text"] = r["text"] == reference_text
    return {
        "ttft_s": summary([r["ttft_s"] for r in runs]),
        "total_s": summary([r["total_s"] for r in runs]),
        "same_text": all(r["same_text"] for r in runs),
        "runs": runs,
    }


def versions(args):
    out = {"python": platform.python_version()}
    res = subprocess.run([args.kvcodec, "--version"], capture_output=True, text=True)
    out["kvcodec"] = (res.stdout or res.stderr).strip() if res.returncode == 0 else None
    res = subprocess.run([args.llama_server, "--version"], capture_output=True, text=True)
    out["llama_server"] = (res.stdout + res.stderr).strip() if res.returncode == 0 else None
    prefix = os.path.dirname(os.path.dirname(os.path.abspath(args.llama_server)))
    for key, name in (("llama_cpp_commit", "COMMIT"), ("node_llama_cpp", "VERSION")):
        try:
            with open(os.path.join(prefix, name)) as f:
                out[key] = f.read().strip()
        except OSError:
            out[key] = None
    try:
        out["kvcodec_git"] = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                                            text=True).stdout.strip() or None
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout
        # Of the tree when the benchmark ran, which need not be the tree the binary was built from.
        out["kvcodec_git_dirty_at_run"] = bool(dirty.strip())
    except OSError:
        pass
    return out


def machine():
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release(), "machine": platform.machine()}


def find_llama_server():
    script = os.path.join(REPO, "scripts/setup-llama-server.sh")
    log("no --llama-server: running scripts/setup-llama-server.sh (builds it on first use, ~10 min)")
    res = subprocess.run([script], stdout=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise BenchError("scripts/setup-llama-server.sh failed (exit %d)" % res.returncode)
    return res.stdout.strip().splitlines()[-1]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--kvcodec", default=DEFAULT_KVCODEC, help="kvcodec binary (CMake build: tools/kvcodec/kvcodec)")
    p.add_argument("--llama-server", help="llama-server binary (default: scripts/setup-llama-server.sh's)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--link-gbps", default="0.01,0.1", help="comma-separated link rates for the link rows")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--ctx", type=int, default=4096, help="context of both servers")
    p.add_argument("--prompt-tokens", type=int, default=1450, help="tokens per prompt, BOS included (at most)")
    p.add_argument("--text", default=None, help="text the prompts are cut from (default: the model's eval.txt)")
    # llama-server turns flash attention on by default where the backend has it (-fa auto): the
    # same setting for kvcodec serve.
    p.add_argument("--kvcodec-args", default="--flash-attn",
                   help="extra arguments for kvcodec serve (default: --flash-attn, as llama-server's default -fa auto)")
    p.add_argument("--llama-server-args", default="", help="extra arguments for llama-server")
    p.add_argument("--work", help="work directory (kept; default: a temporary one, removed at the end)")
    p.add_argument("--out", help="JSON output file (default: stdout)")
    args = p.parse_args()
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    try:
        args.link_gbps = [float(x) for x in args.link_gbps.split(",") if x.strip()]
    except ValueError:
        p.error("--link-gbps: comma-separated numbers, e.g. 0.01,0.1")
    if any(r <= 0 for r in args.link_gbps):
        p.error("--link-gbps: rates must be positive")
    args.model = os.path.abspath(args.model)
    if args.text is None:
        args.text = os.path.join(os.path.dirname(args.model), "eval.txt")
    return args


def main():
    args = parse_args()
    if not os.path.isfile(args.model):
        raise BenchError("model not found: %s" % args.model)
    if not os.access(args.kvcodec, os.X_OK):
        raise BenchError("kvcodec not found at %s: build it (scripts/setup.sh, then `cmake --build build/release "
                         "--target kvcodec_cli`) or pass --kvcodec" % args.kvcodec)
    if args.llama_server is None:
        args.llama_server = find_llama_server()
    if not os.access(args.llama_server, os.X_OK):
        raise BenchError("llama-server not found at %s: scripts/setup-llama-server.sh builds it" % args.llama_server)
    args.kvcodec = os.path.abspath(args.kvcodec)
    args.llama_server = os.path.abspath(args.llama_server)

    own_work = args.work is None
    work = tempfile.mkdtemp(prefix="bench-llama-server-") if own_work else os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    try:
        with open(args.text, encoding="utf-8") as f:
            text = f.read()
        # Two prompts from far-apart parts of the held-out text: no shared prefix beyond BOS.
        prompts = {"A": cut_prompt(args.kvcodec, args.model, text, 0, args.prompt_tokens, work),
                   "B": cut_prompt(args.kvcodec, args.model, text, len(text) // 2, args.prompt_tokens, work)}
        for k, v in prompts.items():
            log("prompt %s: chars %d-%d, %d tokens" % (k, v["char_range"][0], v["char_range"][1],
                                                        v["tokens_kvcodec_tokenize"]))
        llama = run_llama_server(args, prompts, work)
        kvc = run_kvcodec(args, prompts, work)
    finally:
        Server.stop_all()
        if own_work:
            shutil.rmtree(work, ignore_errors=True)

    # Greedy decoding of the same tokens by the same llama.cpp: llama-server's cold text is the
    # reference every other case must reproduce (a lossy codec or a bad restore shows up here).
    reference = llama["runs"]["cold"][0]["text"]
    result = {
        "schema": "kvcodec-bench-llama-server/1",
        "started": started,
        "elapsed_s": time.monotonic() - STARTED,
        "machine": machine(),
        "versions": versions(args),
        "model": os.path.relpath(args.model, REPO) if args.model.startswith(REPO) else args.model,
        "model_bytes": os.path.getsize(args.model),
        "settings": {"repeats": args.repeats, "max_tokens": args.max_tokens, "ctx": args.ctx, "threads": 1,
                     "parallel": 1, "link_gbps": args.link_gbps, "prompt_tokens_target": args.prompt_tokens,
                     "kvcodec_args": args.kvcodec_args, "llama_server_args": args.llama_server_args,
                     "ttft": "client-side: request sent to first server-sent event with non-empty text"},
        "prompts": {},
        "reference_text": reference,
        "llama_server": {},
        "kvcodec": {},
        "links": [],
        "warnings": [],
    }
    for k, v in prompts.items():
        result["prompts"][k] = {"source": os.path.relpath(args.text, REPO), "char_range": v["char_range"],
                                "tokens_kvcodec_tokenize": v["tokens_kvcodec_tokenize"]}
    result["prompts"]["A"]["prompt_tokens_llama_server"] = llama["runs"]["cold"][0]["prompt_tokens"]
    result["prompts"]["A"]["prompt_tokens_kvcodec"] = kvc["runs"]["cold"][0]["prompt_tokens"]
    n_tokens = (result["prompts"]["A"]["prompt_tokens_llama_server"] or
                result["prompts"]["A"]["tokens_kvcodec_tokenize"])

    for name, data in (("llama_server", llama), ("kvcodec", kvc)):
        out = result[name]
        out["command"] = data["commands"][0]
        out["commands"] = data["commands"]
        out["cases"] = {case: case_summary(runs, reference) for case, runs in data["runs"].items()}
    result["kvcodec"]["links"] = {r: case_summary(v, reference) for r, v in kvc["links"].items()}

    slot = llama["slot_file_bytes"]
    store = kvc["store_bytes_after_a"]
    result["llama_server"]["bytes_on_disk"] = dict(slot, per_prompt_token=slot["median"] / n_tokens,
                                                   what="slot file after A (its state includes the generated tokens)")
    result["kvcodec"]["bytes_on_disk"] = dict(store, per_prompt_token=store["median"] / n_tokens,
                                              files=kvc["store_files_after_a"],
                                              by_kind=kvc["store_bytes_by_kind_after_a"][0],
                                              stored_bytes_counter=kvc["stored_bytes_counter_after_a"],
                                              what="store directory after A once")
    result["llama_server"]["restore_call_s"] = llama["restore_call_s"]
    result["llama_server"]["props"] = llama["props"]
    result["llama_server"]["save_responses"] = llama["save_responses"]
    result["llama_server"]["restore_responses"] = llama["restore_responses"]
    result["bytes_on_disk_tokens"] = n_tokens

    restart_ttft = [r["ttft_s"] for r in llama["runs"]["restart"]]
    for rate in args.link_gbps:
        # Per repeat: that repeat's slot file over the link, its restore call, its TTFT after it.
        computed = [b * 8 / (rate * 1e9) + rs + t
                    for b, rs, t in zip(slot["values"], llama["restore_call_s"]["values"], restart_ttft)]
        result["links"].append({
            "gbps": rate,
            "kvcodec_ttft_s": result["kvcodec"]["links"][repr(rate)]["ttft_s"],
            "kvcodec_same_text": result["kvcodec"]["links"][repr(rate)]["same_text"],
            # What crossed the link: kvcodec fetches one level per chunk of what it stores.
            "kvcodec_fetched_bytes": summary([r.get("metrics_delta", {}).get("kvcodec_fetched_bytes_total")
                                              for r in kvc["links"][repr(rate)]]),
            "llama_server_link_bytes": slot,
            "llama_server_ttft_s": dict(summary(computed), computed=True,
                                        formula="slot_file_bytes*8/(gbps*1e9) + restore_call_s + ttft_after_restore"),
            "recompute_ttft_s": {"llama_server": result["llama_server"]["cases"]["cold"]["ttft_s"],
                                 "kvcodec": result["kvcodec"]["cases"]["cold"]["ttft_s"]},
        })

    for name in ("llama_server", "kvcodec"):
        cases = dict(result[name]["cases"])
        if name == "kvcodec":
            cases.update({"link %s Gbps" % r: v for r, v in result["kvcodec"]["links"].items()})
        for case, s in cases.items():
            if not s["same_text"]:
                w = "%s %s: generated text differs from llama-server's cold text" % (name, case)
                result["warnings"].append(w)
                log("WARNING: " + w)
    result["elapsed_s"] = time.monotonic() - STARTED

    text_out = json.dumps(result, indent=1) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text_out)
        log("wrote %s (%.0f s)" % (args.out, result["elapsed_s"]))
    else:
        sys.stdout.write(text_out)


def on_sigterm(signum, frame):
    # SystemExit unwinds through main's finally, which stops the servers.
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGHUP, on_sigterm)
    try:
        main()
    except BenchError as e:
        Server.stop_all()
        print("bench_llama_server: %s" % e, file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        Server.stop_all()
        print("bench_llama_server: interrupted; servers stopped", file=sys.stderr)
        sys.exit(130)
