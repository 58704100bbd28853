"""The requests a llama-server user sends, the JSON shapes of the answers, and how two servers'
shapes are compared. Shared by scripts/compat_llama_server.py (runs llama.cpp's llama-server and
`kvcodec serve` side by side and records llama-server's shapes) and tests/compat/check_shapes.py
(checks kvcodec serve alone against that record).

A shape is the JSON value with every leaf replaced by its type name ("string", "integer",
"number", "boolean", "null"); an array becomes a one-element list holding the merged shape of all
its elements (an array's first element alone can miss keys: llama-server's idle slot 0 in GET
/slots carries four keys, a used slot twenty), an empty array stays []. A server-sent event stream
is the merged shape of its data events (the last event of a llama-server stream carries timings,
the others do not).

Standard library only: the suite runs it with the system's python3.
"""

import http.client
import json
import os
import sys
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))

# Server (start, /health wait, stop of the process group) and free_port are the benchmark's: both
# scripts start the same two servers the same way.
from bench_llama_server import BenchError, Server  # noqa: E402  (path set just above)

SNAPSHOT = os.path.join(HERE, "llama_server_shapes.json")
API_KEY = "kvcodec-compat-key"
SLOT_FILE = "compat-slot0.bin"
CTX = "2048"
SLOTS = "2"

# The llama-server flags issue 40 names, each as a llama-server user writes it. {model},
# {key_file} and {slot_dir} are filled in per run; the values are the compatibility test's own.
NAMED_FLAGS = [
    ("-m", ["-m", "{model}"]),
    ("-c", ["-c", CTX]),
    ("--ctx-size", ["--ctx-size", CTX]),
    ("-np", ["-np", SLOTS]),
    ("-t", ["-t", "1"]),
    ("--api-key-file", ["--api-key-file", "{key_file}"]),
    ("--jinja", ["--jinja"]),
    ("--slot-save-path", ["--slot-save-path", "{slot_dir}"]),
]


def fill(argv, values):
    return [a.format(**values) for a in argv]


def llama_command_line(values):
    """The one command line both servers are started with: every named flag at once."""
    argv = ["-m", "{model}", "-c", CTX, "-np", SLOTS, "-t", "1", "--api-key-file", "{key_file}", "--jinja",
            "--slot-save-path", "{slot_dir}", "--host", "127.0.0.1"]
    return fill(argv, values)


# ---------------------------------------------------------------------------------------------
# Shapes


def shape(value):
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        merged = None
        for v in value:
            merged = shape(v) if merged is None else merge(merged, shape(v))
        return [] if merged is None else [merged]
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "string"


def type_name(s):
    if isinstance(s, dict):
        return "object"
    if isinstance(s, list):
        return "array"
    return s


def merge(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = merge(out[k], v) if k in out else v
        return out
    if isinstance(a, list) and isinstance(b, list):
        if a and b:
            return [merge(a[0], b[0])]
        return a or b
    ta, tb = type_name(a), type_name(b)
    if ta == tb:
        return a
    if ta == "null":
        return b
    if tb == "null":
        return a
    return "|".join(sorted(set(ta.split("|")) | set(tb.split("|"))))


def compatible(ref_type, got_type):
    """A null on either side says nothing about the type (llama-server sends "logprobs": null
    where a request asked for none); a JSON number is one type whether it prints a fraction or not."""
    if "null" in (ref_type, got_type):
        return True
    numbers = {"integer", "number"}
    ref_set, got_set = set(ref_type.split("|")), set(got_type.split("|"))
    return bool(ref_set & got_set) or bool(ref_set & numbers and got_set & numbers)


def join(path, key):
    return key if not path else path + "." + key


def compare(ref, got, path="", out=None):
    """Keys the reference has that `got` lacks, keys `got` adds, and leaf type mismatches, as
    dotted paths ("timings.prompt_ms", "choices[].text"). Under a missing or added key nothing
    more is listed: the key itself says it."""
    if out is None:
        out = {"missing": [], "added": [], "type_mismatch": []}
    if isinstance(ref, dict) and isinstance(got, dict):
        for k in ref:
            if k not in got:
                out["missing"].append(join(path, k))
            else:
                compare(ref[k], got[k], join(path, k), out)
        out["added"].extend(join(path, k) for k in got if k not in ref)
    elif isinstance(ref, list) and isinstance(got, list):
        if ref and got:  # an empty array has no element shape to hold against the other's
            compare(ref[0], got[0], path + "[]", out)
    else:
        rt, gt = type_name(ref), type_name(got)
        if not compatible(rt, gt):
            out["type_mismatch"].append({"path": path or "(top)", "llama_server": rt, "kvcodec": gt})
    return out


def paths(s, path=""):
    """Every key path of a shape: the objects and arrays themselves and their leaves."""
    out = []
    if isinstance(s, dict):
        for k, v in s.items():
            p = join(path, k)
            out.append(p)
            out.extend(paths(v, p))
    elif isinstance(s, list) and s:
        out.extend(paths(s[0], path + "[]"))
    return out


def sub_shape(s, path):
    for part in path.split("."):
        if part.endswith("[]"):
            s = s.get(part[:-2]) if isinstance(s, dict) else None
            s = s[0] if isinstance(s, list) and s else None
        else:
            s = s.get(part) if isinstance(s, dict) else None
    return s


# ---------------------------------------------------------------------------------------------
# Requests


def send(port, method, path, body=None, raw=None, key=API_KEY, timeout=120):
    """One request; the answer as status, content type, shape and the text it came as. Any JSON
    body is shaped; a text/event-stream answer is shaped from its data events."""
    headers = {}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    payload = raw if raw is not None else (None if body is None else json.dumps(body))
    if payload is not None:
        headers["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, payload, headers)
        resp = conn.getresponse()
        data = resp.read().decode(errors="replace")
        content_type = resp.getheader("Content-Type", "")
        status = resp.status
    finally:
        conn.close()
    out = {"status": status, "content_type": content_type.split(";")[0].strip(), "text": data}
    if content_type.startswith("text/event-stream") or data.startswith("data:"):
        events, done = [], False
        for line in data.splitlines():
            if not line.startswith("data:"):
                continue
            item = line[5:].strip()
            if item == "[DONE]":
                done = True
                continue
            try:
                events.append(json.loads(item))
            except ValueError:
                events.append("(not JSON) " + item[:80])
        merged = None
        for ev in events:
            merged = shape(ev) if merged is None else merge(merged, shape(ev))
        out.update(sse=True, events=len(events), done_marker=done, shape=merged)
    else:
        try:
            out["shape"] = shape(json.loads(data))
            out["json"] = json.loads(data)
        except ValueError:
            out["shape"] = None
    return out


PROMPT = "And it came to pass"
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Who came?"}]

# The requests, in the order sent (a slot is filled before it is saved; the id of GET /v1/models
# is known before /v1/models/{id}; /detokenize gets /tokenize's tokens).
#   named:   an endpoint issue 40 names: missing (404/405), or failing where llama-server answers
#            2xx, fails the comparison
#   require: key paths (and everything under them) that kvcodec must have where llama-server does
#   expect:  the status class kvcodec must answer, whatever llama-server does
#   reference: (result name, sub-path) whose shape stands in for llama-server's when llama-server
#            has no such endpoint or answers it only under another flag
PROBES = [
    {"name": "GET /health", "method": "GET", "path": "/health", "key": None},
    {"name": "GET /props", "method": "GET", "path": "/props", "named": True},
    {"name": "POST /completion", "method": "POST", "path": "/completion", "named": True,
     "body": {"prompt": PROMPT, "n_predict": 8, "cache_prompt": True, "temperature": 0},
     "require": ["content", "timings"]},
    {"name": "POST /completion (stream)", "method": "POST", "path": "/completion", "named": True,
     "body": {"prompt": PROMPT, "n_predict": 4, "cache_prompt": True, "temperature": 0, "stream": True},
     "require": ["content", "timings"]},
    # llama-server puts a request in the slot id_slot names; slot 0 then holds a prompt to save.
    {"name": "POST /completion (id_slot 0)", "method": "POST", "path": "/completion",
     "body": {"prompt": PROMPT + " in those days", "n_predict": 4, "cache_prompt": True, "temperature": 0,
              "id_slot": 0}},
    {"name": "GET /slots", "method": "GET", "path": "/slots", "named": True},
    {"name": "POST /slots/0?action=save", "method": "POST", "path": "/slots/0?action=save", "named": True,
     "body": {"filename": SLOT_FILE}, "require": ["id_slot", "filename", "n_saved", "timings"]},
    {"name": "POST /slots/0?action=erase", "method": "POST", "path": "/slots/0?action=erase"},
    {"name": "POST /slots/0?action=restore", "method": "POST", "path": "/slots/0?action=restore", "named": True,
     "body": {"filename": SLOT_FILE}, "require": ["id_slot", "filename", "n_restored", "timings"]},
    {"name": "POST /slots/0?action=restore (missing file)", "method": "POST", "path": "/slots/0?action=restore",
     "body": {"filename": "no-such-slot.bin"}},
    # A slot file name is a name inside --slot-save-path, never a way out of it.
    {"name": "POST /slots/0?action=save (../ in filename)", "method": "POST", "path": "/slots/0?action=save",
     "body": {"filename": "../escaped.bin"}, "expect": "4xx", "guards": "POST /slots/0?action=save"},
    {"name": "POST /apply-template", "method": "POST", "path": "/apply-template", "named": True,
     "body": {"messages": MESSAGES}, "require": ["prompt"]},
    {"name": "GET /v1/models", "method": "GET", "path": "/v1/models"},
    # The OpenAI SDK's models.retrieve(id); llama-server has no such route, so the model object
    # its GET /v1/models lists is what the answer must look like.
    {"name": "GET /v1/models/{id}", "method": "GET", "path": "/v1/models/{model_id}", "named": True,
     "expect": "2xx", "reference": ("GET /v1/models", "data[]"), "require": ["id", "object", "created", "owned_by"]},
    # llama-server answers 501 here unless started with --embeddings (and a pooling the model
    # allows); that server's answer is the shape an embedding has.
    {"name": "POST /v1/embeddings", "method": "POST", "path": "/v1/embeddings", "named": True,
     "body": {"input": PROMPT, "model": "{model_id}"}, "reference": ("POST /v1/embeddings [--embeddings]", ""),
     "require": ["data", "object"]},
    {"name": "POST /completions", "method": "POST", "path": "/completions", "named": True,
     "body": {"prompt": PROMPT, "max_tokens": 4, "temperature": 0}},
    {"name": "POST /chat/completions", "method": "POST", "path": "/chat/completions", "named": True,
     "body": {"messages": MESSAGES, "max_tokens": 4, "temperature": 0}},
    {"name": "POST /v1/completions", "method": "POST", "path": "/v1/completions",
     "body": {"prompt": PROMPT, "max_tokens": 4, "temperature": 0}},
    {"name": "POST /v1/completions (stream)", "method": "POST", "path": "/v1/completions",
     "body": {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "stream": True,
              "stream_options": {"include_usage": True}}},
    {"name": "POST /v1/chat/completions", "method": "POST", "path": "/v1/chat/completions",
     "body": {"messages": MESSAGES, "max_tokens": 4, "temperature": 0}},
    {"name": "POST /v1/chat/completions (stream)", "method": "POST", "path": "/v1/chat/completions",
     "body": {"messages": MESSAGES, "max_tokens": 4, "temperature": 0, "stream": True}},
    {"name": "POST /tokenize", "method": "POST", "path": "/tokenize", "body": {"content": PROMPT}},
    {"name": "POST /detokenize", "method": "POST", "path": "/detokenize", "body": {"tokens": "{tokens}"}},
    {"name": "POST /completion (bad JSON)", "method": "POST", "path": "/completion", "raw": "{\"prompt\": "},
    {"name": "GET /props (wrong key)", "method": "GET", "path": "/props", "key": "not-the-key", "expect": "401"},
    {"name": "GET /props (no key)", "method": "GET", "path": "/props", "key": None, "expect": "401"},
    {"name": "POST /v1/completions (wrong key)", "method": "POST", "path": "/v1/completions", "key": "not-the-key",
     "body": {"prompt": PROMPT, "max_tokens": 1}, "expect": "401"},
]

EMBEDDINGS_PROBE = {"name": "POST /v1/embeddings [--embeddings]", "method": "POST", "path": "/v1/embeddings",
                    "body": {"input": PROMPT, "model": "{model_id}"}}


def substitute(value, context):
    if isinstance(value, dict):
        return {k: substitute(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, context) for v in value]
    if value == "{tokens}":
        return context.get("tokens", [1])
    if isinstance(value, str) and "{model_id}" in value:
        return value.replace("{model_id}", context.get("model_id", "model"))
    return value


def run_probes(port, probes=None, log=None):
    """Sends every probe to the server on `port`; results by probe name."""
    context, results = {}, {}
    for probe in probes or PROBES:
        path = probe["path"]
        if "{model_id}" in path:
            path = path.replace("{model_id}", urllib.parse.quote(context.get("model_id", "model"), safe=""))
        try:
            r = send(port, probe["method"], path, substitute(probe.get("body"), context), probe.get("raw"),
                     probe.get("key", API_KEY))
        except OSError as e:
            r = {"status": None, "error": "%s: %s" % (type(e).__name__, e), "shape": None}
        r["request"] = "%s %s" % (probe["method"], path)
        results[probe["name"]] = r
        data = r.get("json")
        if probe["path"] == "/v1/models" and isinstance(data, dict) and data.get("data"):
            context["model_id"] = data["data"][0].get("id", "model")
        if probe["path"] == "/tokenize" and isinstance(data, dict) and isinstance(data.get("tokens"), list):
            context["tokens"] = data["tokens"]
        if log:
            log("  %-48s HTTP %s" % (probe["name"], r["status"]))
    return results


def status_class_ok(status, expect):
    if status is None:
        return False
    if expect.endswith("xx"):
        return str(status)[0] == expect[0]
    return str(status) == expect


def reference_shape(probe, llama):
    ref = llama.get(probe["name"], {})
    if "reference" in probe:
        name, sub = probe["reference"]
        base = llama.get(name, {}).get("shape")
        return sub_shape(base, sub) if sub and base is not None else base
    return ref.get("shape")


def required_failures(probe, llama, got):
    """Why kvcodec's answer to a probe falls short of what issue 40 requires; [] when it does not.
    llama: llama-server's results by probe name (live or recorded); got: kvcodec's result."""
    if not probe.get("named") and "expect" not in probe:
        return []
    status = got.get("status") if got else None
    if status is None:
        return ["no answer (%s)" % (got or {}).get("error", "server not running")]
    if probe.get("guards"):
        # Only meaningful where the guarded endpoint exists; its absence is reported on its own.
        return [] if status in (404, 405) or status_class_ok(status, probe["expect"]) else [
            "HTTP %d, want %s" % (status, probe["expect"])]
    if status in (404, 405):
        return ["missing (HTTP %d)" % status]
    if "expect" in probe:
        if not status_class_ok(status, probe["expect"]):
            return ["HTTP %d, want %s" % (status, probe["expect"])]
    else:
        ref_status = llama.get(probe["name"], {}).get("status")
        if ref_status is not None and 200 <= ref_status < 300 and not 200 <= status < 300:
            return ["HTTP %d where llama-server answers %d" % (status, ref_status)]
    if not 200 <= status < 300 or not probe.get("require"):
        return []
    have = set(paths(got.get("shape")))
    return ["lacks %s" % p for p in required_paths(probe, llama) if p not in have]


def required_paths(probe, llama):
    """The key paths kvcodec must answer with: each `require` entry and every path under it in
    llama-server's shape (all of timings.*, not only the word timings)."""
    require = probe.get("require", [])
    ref = reference_shape(probe, llama)
    if ref is None:
        return list(require)
    return [p for p in paths(ref) if any(p == r or p.startswith(r + ".") or p.startswith(r + "[]") for r in require)]


def differences(probe, llama, got):
    """Everything that differs, listed whether or not it is required."""
    ref = llama.get(probe["name"], {})
    out = {"llama_server_status": ref.get("status"), "kvcodec_status": got.get("status") if got else None}
    out["status_mismatch"] = out["llama_server_status"] != out["kvcodec_status"]
    ref_shape = reference_shape(probe, llama)
    got_shape = got.get("shape") if got else None
    # Shapes compare where both succeeded, or failed alike (two 401s: the error objects); a
    # reference shape is a success's, held only against kvcodec's success.
    ok = [s is not None and 200 <= s < 300 for s in (out["llama_server_status"], out["kvcodec_status"])]
    alike = all(ok) or (out["kvcodec_status"] is not None and not out["status_mismatch"])
    if ref_shape is not None and got_shape is not None and (ok[1] if "reference" in probe else alike):
        out.update(compare(ref_shape, got_shape))
    if ref.get("sse") or (got or {}).get("sse"):
        out["stream"] = {"llama_server": {k: ref.get(k) for k in ("sse", "done_marker", "content_type")},
                         "kvcodec": {k: (got or {}).get(k) for k in ("sse", "done_marker", "content_type")}}
    return out


def start_server(name, command, argv, log_path, ready_timeout=60.0):
    """Starts `command argv --port P` (command: [llama-server] or [kvcodec, serve]); the Server,
    or None (with the log's last lines) where it would not come up: a refused flag ends the
    process before /health answers."""
    srv = Server(name, lambda port: command + argv + ["--port", str(port)], log_path)
    try:
        return srv.start(ready_timeout), ""
    except BenchError:
        return None, srv.log_tail(6)


def load_snapshot(path=SNAPSHOT):
    with open(path, encoding="utf-8") as f:
        return json.load(f)
