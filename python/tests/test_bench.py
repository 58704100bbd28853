"""python/bench.py runs and reports every rung (its figures are for docs/results.md, not asserted)."""

import json
import os
import pathlib
import subprocess
import sys


def test_bench_reports_every_rung(real_kv, tmp_path):
    _, _, _, raw = real_kv
    chunk = tmp_path / "chunk.kvc"
    chunk.write_bytes(raw)
    bench = pathlib.Path(__file__).resolve().parents[1] / "bench.py"
    result = subprocess.run([sys.executable, str(bench), "--kv", str(chunk), "--rounds", "1"], check=True,
                            capture_output=True, text=True, env=dict(os.environ))
    report = json.loads(result.stdout)
    assert [(r["codec"], r["level"]) for r in report["rows"]] == [
        ("quant", "8"), ("quant", "4"), ("kvtc", "16"), ("cachegen", "medium"), ("video", "8"), ("raw", "fp16")]
    for row in report["rows"]:
        assert row["cpp_encode_s"] > 0 and row["python_encode_s"] > 0
        assert row["cpp_decode_s"] > 0 and row["python_decode_s"] > 0
        assert row["chunk_tokens"] == 256
