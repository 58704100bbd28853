"""Shared fixtures: the kvcodec command (KVCODEC_CLI), the repository (KVCODEC_ROOT) and real KV
of the test model, made by the command and read back through the package."""

import os
import pathlib
import subprocess

import pytest

import kvcodec

ROOT = pathlib.Path(os.environ.get("KVCODEC_ROOT", pathlib.Path(__file__).resolve().parents[2]))
MODEL = ROOT / "models" / "kvtiny" / "kvtiny.gguf"
CALIBRATION = ROOT / "models" / "kvtiny" / "kvtiny.kvcal"


def cli(*args, check=True):
    exe = os.environ.get("KVCODEC_CLI")
    if not exe:
        pytest.fail("KVCODEC_CLI is not set (run through ctest: python.pytest)")
    return subprocess.run([exe, *map(str, args)], check=check, capture_output=True, text=True)


@pytest.fixture(scope="session")
def real_kv(tmp_path_factory):
    """(k, v, model fingerprint, raw .kvc bytes): 256 tokens of the test model's KV as fp16."""
    out = tmp_path_factory.mktemp("kv") / "raw.kvc"
    cli("encode", "--model", MODEL, "--text", MODEL.parent / "eval.txt", "--tokens", 256, "--codec", "raw",
        "-o", out)
    data = out.read_bytes()
    k, v = kvcodec.decode(data)
    return k, v, kvcodec.inspect(data)["model_fingerprint"], data
