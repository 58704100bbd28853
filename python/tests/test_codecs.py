"""Round trips through every codec and dtype, and the same bytes as the C++ command."""

import numpy as np
import pytest

import kvcodec
from conftest import CALIBRATION, MODEL, cli

LOSSY_BOUND = {"quant": 0.05, "cachegen": 0.5, "video": 0.05, "kvtc": 0.5}  # relative RMS error, default level


def rel_rms(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b**2)))


@pytest.fixture(scope="module")
def calibration():
    return kvcodec.Calibration.load(CALIBRATION)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("codec", ["raw", "planes", "quant", "cachegen", "video", "kvtc"])
def test_round_trip_keeps_shape_and_dtype_within_the_codecs_error(real_kv, calibration, codec, dtype):
    k, v, model, _ = real_kv
    k, v = k.astype(dtype), v.astype(dtype)
    data = kvcodec.encode(k, v, codec, calibration=calibration if codec == "kvtc" else None, model=model)
    k2, v2 = kvcodec.decode(data, model=model)
    assert k2.dtype == k.dtype and v2.dtype == v.dtype
    assert k2.shape == k.shape and v2.shape == v.shape
    if codec == "raw":
        assert np.array_equal(k2, k) and np.array_equal(v2, v)
    elif codec == "planes":  # lossless in any dtype: the very bytes, and fewer of them
        assert k2.tobytes() == k.tobytes() and v2.tobytes() == v.tobytes()
        assert len(data) < k.nbytes + v.nbytes
    else:
        assert rel_rms(k2, k) < LOSSY_BOUND[codec]
        assert rel_rms(v2, v) < LOSSY_BOUND[codec]
        assert len(data) < k.nbytes + v.nbytes


@pytest.mark.parametrize("codec,level", [("quant", "8"), ("quant", "4"), ("cachegen", "medium"), ("kvtc", "16")])
def test_python_writes_the_bytes_the_command_writes(real_kv, tmp_path, calibration, codec, level):
    k, v, model, _ = real_kv
    out = tmp_path / "cli.kvc"
    cli("encode", "--model", MODEL, "--text", MODEL.parent / "eval.txt", "--tokens", 256, "--codec", codec,
        "--level", level, "--calibration", CALIBRATION, "-o", out)
    ours = kvcodec.encode(k, v, codec, level, calibration=calibration if codec == "kvtc" else None, model=model)
    assert ours == out.read_bytes()


def test_a_python_file_decodes_with_the_command(real_kv, tmp_path, calibration):
    k, v, model, _ = real_kv
    path = tmp_path / "py.kvc"
    path.write_bytes(kvcodec.encode(k, v, "kvtc", "16", calibration=calibration))
    result = cli("decode", path, "--model", MODEL, "--calibration", CALIBRATION)
    layers, tokens, heads, dims = k.shape
    assert f"{layers} layers x {tokens} tokens x {heads} kv heads x {dims} dims" in result.stdout
    tampered = bytearray(path.read_bytes())
    tampered[-10] ^= 0x40
    path.write_bytes(bytes(tampered))
    assert cli("decode", path, "--model", MODEL, "--calibration", CALIBRATION, check=False).returncode != 0


def test_torch_round_trip_on_the_models_kv(real_kv):
    torch = pytest.importorskip("torch")
    k, v, model, _ = real_kv
    kt, vt = torch.from_numpy(k).to(torch.bfloat16), torch.from_numpy(v).to(torch.bfloat16)
    k2, v2 = kvcodec.decode(kvcodec.encode(kt, vt, "quant", "8", model=model))
    assert k2.dtype == torch.bfloat16 and tuple(k2.shape) == k.shape
    assert rel_rms(k2.float().numpy(), kt.float().numpy()) < LOSSY_BOUND["quant"]
    assert rel_rms(v2.float().numpy(), vt.float().numpy()) < LOSSY_BOUND["quant"]


def test_a_file_for_another_model_is_refused(real_kv):
    k, v, model, _ = real_kv
    data = kvcodec.encode(k, v, "quant", model=model)
    with pytest.raises(kvcodec.InvalidArgumentError):
        kvcodec.decode(data, model="00" * 16)


def test_inspect_matches_the_header(real_kv):
    k, v, model, _ = real_kv
    info = kvcodec.inspect(kvcodec.encode(k, v, "quant", "8", model=model, pos_begin=7))
    assert (info["codec"], info["level"], info["dtype"]) == ("quant", "8", "f16")
    assert (info["n_layers"], info["n_tokens"], info["n_kv_heads"], info["head_dim"]) == k.shape
    assert info["model_fingerprint"] == model and info["pos_begin"] == 7


def test_bad_input_raises_a_kvcodec_error():
    k = np.zeros((1, 4, 1, 8), np.float16)
    with pytest.raises(kvcodec.InvalidArgumentError, match="unknown codec"):
        kvcodec.encode(k, k, "nope")
    with pytest.raises(kvcodec.InvalidArgumentError, match="calibration"):
        kvcodec.encode(k, k, "kvtc")
    with pytest.raises(kvcodec.InvalidArgumentError, match="4 dimensions"):
        kvcodec.encode(k[0], k[0], "raw")
    with pytest.raises(kvcodec.InvalidArgumentError):
        kvcodec.encode(k.astype(np.int32), k.astype(np.int32), "raw")
    with pytest.raises(kvcodec.InvalidArgumentError, match="shape"):
        kvcodec.encode(k, k[:, :2], "raw")
    with pytest.raises(kvcodec.Error):
        kvcodec.encode(np.full_like(k, np.inf), k, "quant")


def test_corrupt_files_raise_and_never_crash(real_kv):
    k, v, model, _ = real_kv
    data = bytearray(kvcodec.encode(k[:, :64], v[:, :64], "quant", "4", model=model))
    rng = np.random.default_rng(1)
    raised = 0
    for trial in range(300):
        bad = bytearray(data)
        if trial % 3 == 0:
            bad = bad[: int(rng.integers(0, len(bad)))]
        else:
            for _ in range(int(rng.integers(1, 8))):
                bad[int(rng.integers(0, len(bad)))] ^= 1 << int(rng.integers(0, 8))
        try:
            kvcodec.decode(bytes(bad))
        except kvcodec.Error:
            raised += 1
    assert raised >= 250  # the file's checksums catch nearly every change
    with pytest.raises(kvcodec.CorruptError):
        kvcodec.decode(b"")
    with pytest.raises(kvcodec.CorruptError):
        kvcodec.inspect(bytes(data[:20]))


def test_a_huge_broadcast_shape_is_refused_before_it_is_copied():
    # A broadcast view of one value claims a pebibyte; copying it into a contiguous buffer would
    # fail with numpy's MemoryError (torch's RuntimeError) before the binding saw the shape.
    one = np.zeros((1, 1, 1, 1), np.float16)
    huge = np.broadcast_to(one, (1024, 1 << 22, 1024, 128))
    with pytest.raises(kvcodec.InvalidArgumentError, match="limit"):
        kvcodec.encode(huge, huge, "raw")
    with pytest.raises(kvcodec.InvalidArgumentError, match="every dimension"):
        kvcodec.encode(np.broadcast_to(one, (1, 1 << 23, 1, 8)), one, "raw")
    with pytest.raises(kvcodec.InvalidArgumentError, match="4 dimensions"):
        kvcodec.encode(np.broadcast_to(np.zeros(1, np.float16), (1 << 40,)), one, "raw")
    torch = pytest.importorskip("torch")
    expanded = torch.zeros((1, 1, 1, 1), dtype=torch.bfloat16).expand(1024, 1 << 22, 1024, 128)
    with pytest.raises(kvcodec.InvalidArgumentError, match="limit"):
        kvcodec.encode(expanded, expanded, "raw")


def test_text_that_has_no_utf8_form_raises_invalid_argument():
    k = np.zeros((1, 4, 1, 8), np.float16)
    lone = "\ud800"
    calls = [
        lambda: kvcodec.encode(k, k, "quant", lone),
        lambda: kvcodec.encode(k, k, lone),
        lambda: kvcodec.encode(k, k, "quant", "8", params={lone: "1"}),
        lambda: kvcodec.encode(k, k, "raw", model=lone * 32),
        lambda: kvcodec.chunk_object_name(bytes(16), "quant", lone),
        lambda: kvcodec.Store("mem://").put(lone, b"x"),
        lambda: kvcodec.Store("mem://").get("a" + lone),
        lambda: kvcodec.Store(lone),
        lambda: kvcodec.Calibration.load(lone + ".kvcal"),
    ]
    for call in calls:
        with pytest.raises(kvcodec.InvalidArgumentError):
            call()


def test_a_4d_buffer_is_taken_as_the_array_it_holds(real_kv):
    k, v, model, _ = real_kv
    for dtype in (np.float16, np.float32):
        ka, va = k.astype(dtype), v.astype(dtype)
        as_arrays = kvcodec.encode(ka, va, "quant", "8", model=model)
        assert kvcodec.encode(memoryview(ka), memoryview(va), "quant", "8", model=model) == as_arrays
        k2, v2 = kvcodec.decode(as_arrays, framework="memoryview")
        assert isinstance(k2, memoryview) and k2.shape == ka.shape and k2.format == np.dtype(dtype).char
        assert np.array_equal(np.asarray(k2), kvcodec.decode(as_arrays)[0])
        assert kvcodec.encode(k2, v2, "raw") == kvcodec.encode(np.asarray(k2), np.asarray(v2), "raw")
    with pytest.raises(kvcodec.InvalidArgumentError, match="format 'd'"):
        kvcodec.encode(memoryview(k.astype(np.float64)), memoryview(v.astype(np.float64)), "raw")
    with pytest.raises(kvcodec.InvalidArgumentError, match="4 dimensions"):
        kvcodec.encode(memoryview(k.reshape(-1)), memoryview(v.reshape(-1)), "raw")
    with pytest.raises(kvcodec.InvalidArgumentError, match="C-contiguous"):
        kvcodec.encode(memoryview(k[:, ::2]), memoryview(v[:, ::2]), "raw")
    with pytest.raises(kvcodec.InvalidArgumentError, match="memoryview"):
        kvcodec.encode([[[[1.0]]]], [[[[1.0]]]], "raw")
    with pytest.raises(kvcodec.InvalidArgumentError, match="framework"):
        kvcodec.decode(kvcodec.encode(k, v, "raw"), framework="jax")


def test_a_model_is_its_fingerprint_as_bytes_or_hex(real_kv):
    k, v, model, _ = real_kv
    k, v = k[:, :16], v[:, :16]
    fingerprint = bytes.fromhex(model)
    files = {kvcodec.encode(k, v, "quant", "8", model=m)
             for m in (model, model.upper(), fingerprint, bytearray(fingerprint), memoryview(fingerprint))}
    assert len(files) == 1 and kvcodec.inspect(files.pop())["model_fingerprint"] == model
    assert kvcodec.chunk_keys(model, range(512)) == kvcodec.chunk_keys(fingerprint, range(512))
    for wrong in ("meta-llama/Llama-3.2-1B", model[:31], model + "0", "0x" + model[2:], fingerprint[:15], 7,
                  "\ud800" * 32):
        with pytest.raises(kvcodec.InvalidArgumentError, match="tokenize --json"):
            kvcodec.encode(k, v, "quant", "8", model=wrong)
        with pytest.raises(kvcodec.InvalidArgumentError, match="16-byte fingerprint"):
            kvcodec.chunk_keys(wrong, range(256))


# Run in a child interpreter where `import numpy` fails, as in a venv without it: the whole core
# API on memoryviews, giving the bytes numpy's arrays give (written by the parent to compare).
WITHOUT_NUMPY = r"""
import array, random, sys
sys.modules["numpy"] = None  # import numpy raises ImportError
import kvcodec

expected = open(sys.argv[1], "rb").read()
model = sys.argv[2]
random.seed(1)
values = array.array("f", (random.gauss(0, 1) for _ in range(2 * 64 * 2 * 16)))
k = memoryview(values).cast("B").cast("f", (2, 64, 2, 16))
data = kvcodec.encode(k, k, "quant", "8", model=model)
assert data == expected, "a memoryview encodes as the array holding the same values"
assert kvcodec.inspect(data)["n_tokens"] == 64
k2, v2 = kvcodec.decode(data, model=bytes.fromhex(model))
assert isinstance(k2, memoryview) and k2.shape == (2, 64, 2, 16) and k2.format == "f"
assert max(abs(a - b) for a, b in zip(k2.cast("B").cast("f"), values)) < 0.1
half = kvcodec.decode(kvcodec.encode(k, k, "raw"))[0]
try:
    kvcodec.decode(data, framework="numpy")
    raise AssertionError("framework='numpy' without numpy")
except kvcodec.InvalidArgumentError as e:
    assert "needs numpy" in str(e)
store = kvcodec.Store("mem://")
name = kvcodec.chunk_object_name(kvcodec.chunk_keys(model, range(64), 64)[0], "quant", "8")
store.put(name, data)
assert store.get(name) == data
assert "numpy" not in sys.modules or sys.modules["numpy"] is None
print("ok")
"""


def test_the_core_api_works_without_numpy(tmp_path, real_kv):
    import subprocess
    import sys

    model = real_kv[2]
    rng = __import__("random").Random(1)
    values = np.array([rng.gauss(0, 1) for _ in range(2 * 64 * 2 * 16)], np.float32).reshape(2, 64, 2, 16)
    (tmp_path / "expected.kvc").write_bytes(kvcodec.encode(values, values, "quant", "8", model=model))
    result = subprocess.run([sys.executable, "-c", WITHOUT_NUMPY, tmp_path / "expected.kvc", model],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
