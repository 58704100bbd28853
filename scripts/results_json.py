#!/usr/bin/python3
"""Small JSON edits and look-ups for scripts/results.sh, so the shell script holds no inline Python.

results.sh tags some `kvcodec eval` reports with what the report itself cannot know (the entropy
stage a run forced, the ablation calibration it used, the video quantiser group), lists every codec
and level to evaluate, and sizes the rotquant bench per model. Each of those is one subcommand here:

    results_json.py set KEY=STRING KEY:=JSON ...   < report.json   (fields set, printed)
    results_json.py append-suffix KEY SUFFIX       < report.json   (string field extended, printed)
    results_json.py levels                         < codecs.json   ("codec level" lines)
    results_json.py ctx-chunk MODEL_JSON                           ("ctx chunk" for bench rotquant)
    results_json.py prompt-ids N                                   (N token ids for results_memory_kinds.sh)

`set` takes `KEY=VALUE` for a string and `KEY:=VALUE` for a JSON literal (a number, true, null...),
so a group size stays a number in the report instead of becoming a string by accident of quoting.
A report is read as one JSON object from stdin and printed as json.dumps of it on one line: keys
already there keep their place, new keys go last, exactly as the inline snippets this replaces
wrote them (render_results.py and compare_quality.py read these files).
"""

import json
import sys


def parse_assignment(arg):
    """(key, value) from `KEY=STRING` or `KEY:=JSON`; the `:=` form is how a caller asks for a number."""
    key, sep, value = arg.partition("=")
    if not sep or not key or key == ":":
        raise SystemExit(f"results_json.py set: expected KEY=VALUE or KEY:=JSON, got {arg!r}")
    if key.endswith(":"):
        try:
            return key[:-1], json.loads(value)
        except json.JSONDecodeError as e:
            raise SystemExit(f"results_json.py set: {arg!r} is not KEY:=JSON ({e})")
    return key, value


def read_object():
    """The report on stdin; an eval report is one JSON object, anything else is a caller's mistake."""
    report = json.load(sys.stdin)
    if not isinstance(report, dict):
        raise SystemExit("results_json.py: expected a JSON object on stdin")
    return report


def cmd_set(args):
    """Adds (or overwrites) fields of the report, so a result file says which variant made it."""
    report = read_object()
    for key, value in map(parse_assignment, args):
        report[key] = value
    print(json.dumps(report))


def cmd_append_suffix(args):
    """Appends to a string field: `codec` becomes `kvtc+deflate`, which render_results.py keeps out
    of the main tables and shows as the entropy-stage columns of the kvtc curve."""
    if len(args) != 2:
        raise SystemExit("usage: results_json.py append-suffix KEY SUFFIX")
    key, suffix = args
    report = read_object()
    report[key] += suffix
    print(json.dumps(report))


def cmd_levels(args):
    """One "codec level" line per level of every codec in `kvcodec codecs --json`, in its order, so
    results.sh evaluates whatever codecs the binary has without a list of its own."""
    if args:
        raise SystemExit("usage: results_json.py levels < codecs.json")
    for codec in json.load(sys.stdin):
        for level in codec["levels"]:
            print(codec["name"], level)


def cmd_ctx_chunk(args):
    """"ctx chunk" for `kvcodec bench rotquant` on one model: at most 1024 tokens and 256-token chunks,
    less where the model's training context is shorter (past it the KV is not what the model makes)."""
    if len(args) != 1:
        raise SystemExit("usage: results_json.py ctx-chunk MODEL_JSON")
    with open(args[0]) as f:
        ctx = min(1024, json.load(f)["train_ctx"])
    print(ctx, min(256, ctx))


def cmd_prompt_ids(args):
    """N token ids, the same every run and inside every fixture's 128-token vocabulary, for the
    memory-kinds runs (random-weight models have no tokenizer)."""
    if len(args) != 1 or not args[0].isdigit():
        raise SystemExit("usage: results_json.py prompt-ids N")
    print(" ".join(str((i * 37 + 5) % 128) for i in range(int(args[0]))))


COMMANDS = {
    "set": cmd_set,
    "append-suffix": cmd_append_suffix,
    "levels": cmd_levels,
    "ctx-chunk": cmd_ctx_chunk,
    "prompt-ids": cmd_prompt_ids,
}


def main(argv=None):
    """Dispatches to one subcommand; usage (this docstring's module text) on anything else."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        sys.stderr.write(__doc__)
        raise SystemExit(2)
    COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    main()
