#!/usr/bin/python3
"""Compares the quality figures of two folders of `kvcodec eval` reports, file by file.

    scripts/compare_quality.py OLD_DIR NEW_DIR
    scripts/compare_quality.py --tables OLD.md NEW.md

Made for `scripts/results.sh --quality-only --out DIR` before and after a change: a refactor of a
codec should move no ratio, perplexity, agreement or KL figure, and a speed-up should move none
either. Speed and timing fields (any key ending in `_s`, such as encode_mb_s and decode_mb_s, and
`seconds`) differ from run to run and are ignored; every other field is compared, strings and
integers exactly (codec, level, bytes_stored, ...), other numbers up to float rounding: they agree
when they differ by at most one unit in the 6th significant digit of the larger.

Files are matched by name without results.sh's running number (`007-kvtiny-kvtc-8.json` is
`kvtiny-kvtc-8.json`), so a codec added to the binary does not misalign every file after it; a
file on one side only is a difference. Prints a table of the differences (or a line saying there
are none); exit status 0 when none, 1 when any, 2 on a usage error.

--tables compares two renderings of docs/results.md instead (the committed file and
`render_results.py` run on a fresh --quality-only folder): every table row whose section, codec
and level both files hold, cell by cell as printed, speed columns (MB/s, seconds) left out. The
committed file's figures come from a full results.sh run; this checks that the code still makes
them, without the hours the rest of that run takes.
"""

import glob
import json
import math
import os
import re
import sys


def is_speed(key):
    """Timings vary with the machine's load, not with the code's output: never a difference."""
    return key.endswith("_s") or key == "seconds"


def flatten(value, prefix=""):
    """{"a.b[0]": leaf} for a report, so nested reports compare field by field like flat ones."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else k))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def leaf_name(path):
    """The last key of a flattened path (`levels[0].decode_mb_s` -> `decode_mb_s`), to spot speeds."""
    return re.split(r"[.\[]", path)[-1].rstrip("]")


def agree(old, new):
    """Whether two leaves are the same figure: floats up to rounding in the 6th significant digit
    (another summation order may move the last bits), anything else exactly."""
    if isinstance(old, bool) or isinstance(new, bool) or not isinstance(old, (int, float)) \
            or not isinstance(new, (int, float)):
        return old == new
    if isinstance(old, int) and isinstance(new, int):
        return old == new
    if math.isnan(old) or math.isnan(new):
        return math.isnan(old) and math.isnan(new)
    if old == new:
        return True
    largest = max(abs(old), abs(new))
    if math.isinf(largest):
        return False
    return abs(old - new) <= 10.0 ** (math.floor(math.log10(largest)) - 5)


def reports(folder):
    """{name without running number: path} of a folder's *.json."""
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        key = re.sub(r"^\d+-", "", os.path.basename(path))
        if key in found:
            raise SystemExit(f"compare_quality.py: {found[key]} and {path} are the same report")
        found[key] = path
    return found


def compare_file(old_path, new_path):
    """[(field, old, new)] for every quality field of two reports that does not agree."""
    with open(old_path) as f:
        old = flatten(json.load(f))
    with open(new_path) as f:
        new = flatten(json.load(f))
    missing = object()
    rows = []
    for field in list(old) + [k for k in new if k not in old]:
        if is_speed(leaf_name(field)):
            continue
        a, b = old.get(field, missing), new.get(field, missing)
        if a is missing or b is missing or not agree(a, b):
            rows.append((field, "(none)" if a is missing else a, "(none)" if b is missing else b))
    return rows


def show(value):
    """Enough digits to see a difference in the 6th significant one."""
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def change(old, new):
    """Relative change for two numbers, blank otherwise."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (old, new))
    if not numbers or old == new:
        return ""
    if old == 0:
        return "from 0"
    return f"{(new - old) / abs(old):+.3e}"


def table_rows(path):
    """{(section heading, first cell, second cell): {column: cell}} of every markdown table row."""
    rows, section, header = {}, None, None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#"):
                section, header = line, None
            elif line.startswith("|") and header is None:
                header = [c.strip() for c in line.strip("|").split("|")]
            elif line.startswith("|") and not line.startswith("|-"):
                cells = [c.strip() for c in line.strip("|").split("|")]
                if len(cells) == len(header):
                    rows[(section, *cells[:2])] = dict(zip(header, cells))
            elif not line.startswith("|"):
                header = None
    return rows


def compare_tables(old_md, new_md):
    """The cells of the rows both renderings hold, speed columns aside; exit status as main's."""
    old, new = table_rows(old_md), table_rows(new_md)
    speed = re.compile(r"MB/s|seconds|\bms\b|\(s\)|_s$", re.IGNORECASE)
    shared = [key for key in new if key in old]
    if not shared:
        print(f"compare_quality.py: no table row of {new_md} is in {old_md}", file=sys.stderr)
        return 2
    cells, diffs = 0, []
    for key in shared:
        for column, cell in new[key].items():
            if speed.search(column):
                continue
            cells += 1
            if old[key].get(column) != cell:
                diffs.append((key, column, old[key].get(column), cell))
    for (section, *first), column, a, b in diffs:
        print(f"{section} | {' '.join(first)} | {column}: {a} -> {b}")
    print(f"{len(shared)} rows, {cells} cells compared (speed columns left out): {len(diffs)} difference(s).")
    return 1 if diffs else 0


def main(argv=None):
    """Compares OLD_DIR with NEW_DIR; prints the differences and exits 1 if there are any."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--tables":
        return compare_tables(argv[1], argv[2])
    if len(argv) != 2 or argv[0].startswith("-"):
        sys.stderr.write(__doc__)
        return 2
    old_dir, new_dir = argv
    for folder in (old_dir, new_dir):
        if not os.path.isdir(folder):
            print(f"compare_quality.py: no folder {folder}", file=sys.stderr)
            return 2
    old, new = reports(old_dir), reports(new_dir)
    if not old and not new:
        print(f"compare_quality.py: no *.json in {old_dir} or {new_dir}", file=sys.stderr)
        return 2
    rows = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            rows.append((name, "(file)", "present", "(none)"))
        elif name not in old:
            rows.append((name, "(file)", "(none)", "present"))
        else:
            rows.extend((name, *row) for row in compare_file(old[name], new[name]))
    both = len(set(old) & set(new))
    if not rows:
        print(f"No differences: {both} reports, every quality field agrees to 6 significant digits "
              "(speed fields ignored).")
        return 0
    print(f"| file | field | {old_dir} | {new_dir} | relative change |")
    print("|---|---|---:|---:|---:|")
    for name, field, a, b in rows:
        print(f"| {name} | {field} | {show(a)} | {show(b)} | {change(a, b)} |")
    files = len({name for name, *_ in rows})
    print(f"\n{len(rows)} difference(s) in {files} of {len(set(old) | set(new))} reports.")
    return 1


if __name__ == "__main__":
    sys.exit(main())
