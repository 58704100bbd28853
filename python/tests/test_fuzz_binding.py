"""The Python binding's fuzz target: what a caller hands the native part is hostile. Every call with
arguments of the documented types either works or raises a kvcodec.Error subclass with the
library's message (a value out of range included: never a TypeError or OverflowError from the
binding); nothing else escapes and nothing crashes the interpreter (a crash fails the whole run).

Two surfaces: bytes (the C++ fuzz corpora of .kvc and .kvcal files replayed, then mutated by
hypothesis, through decode, inspect and Calibration.load), and arguments (arrays of any shape,
dtype and layout, fingerprints, token lists, object names, store URLs). hypothesis runs
derandomized, so every run tries the same inputs; KVCODEC_FUZZ_EXAMPLES raises the count for a
longer search (python/tests/test_fuzz_binding.py is also a standalone target:
``KVCODEC_FUZZ_EXAMPLES=100000 pytest python/tests/test_fuzz_binding.py``).
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcodec

from conftest import ROOT

CORPUS = ROOT / "fuzz" / "corpus"
EXAMPLES = int(os.environ.get("KVCODEC_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


def seeds(folder):
    return sorted(p for p in (CORPUS / folder).iterdir() if p.is_file())


def either_works_or_raises_error(call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except kvcodec.Error as e:
        assert str(e), "an error without a message"
        return None


def test_corpora_replay():
    for path in seeds("codecs"):
        data = path.read_bytes()
        either_works_or_raises_error(kvcodec.decode, data)
        either_works_or_raises_error(kvcodec.inspect, data)
    for path in seeds("kvcal"):
        either_works_or_raises_error(kvcodec.Calibration.load, path)


def mutate(data: bytes, edits) -> bytes:
    out = bytearray(data)
    for kind, where, value in edits:
        if not out:
            out.append(value)
            continue
        i = where % len(out)
        if kind == 0:
            out[i] ^= 1 << (value % 8)
        elif kind == 1:
            out[i] = value
        elif kind == 2:
            del out[i:]
        else:
            out[i:i] = bytes([value]) * (1 + value % 9)
    return bytes(out)


EDITS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=6)
KVC_SEEDS = [p.read_bytes() for p in seeds("codecs") if p.suffix == ".kvc"]
KVCAL_SEEDS = [p.read_bytes() for p in seeds("kvcal")]


@FUZZ
@given(seed=st.sampled_from(KVC_SEEDS), edits=EDITS, framework=st.sampled_from([None, "numpy", "torch"]))
def test_mutated_kvc_files(seed, edits, framework):
    data = mutate(seed, edits)
    decoded = either_works_or_raises_error(kvcodec.decode, data, framework=framework)
    info = either_works_or_raises_error(kvcodec.inspect, data)
    if decoded is not None:
        k, v = decoded
        assert info is not None and tuple(k.shape) == (info["n_layers"], info["n_tokens"], info["n_kv_heads"],
                                                       info["head_dim"])
        assert k.shape == v.shape


@FUZZ
@given(data=st.binary(max_size=512))
def test_arbitrary_bytes(data):
    either_works_or_raises_error(kvcodec.decode, data)
    either_works_or_raises_error(kvcodec.inspect, data)
    either_works_or_raises_error(kvcodec.decode, b"KVC1" + data)


@FUZZ
@given(seed=st.sampled_from(KVCAL_SEEDS), edits=EDITS)
def test_mutated_calibrations(tmp_path_factory, seed, edits):
    path = tmp_path_factory.mktemp("kvcal") / "fuzz.kvcal"
    path.write_bytes(mutate(seed, edits))
    either_works_or_raises_error(kvcodec.Calibration.load, path)


DTYPES = st.sampled_from([np.float16, np.float32, np.float64, np.int16, np.uint8, np.complex64])
SHAPES = st.lists(st.integers(0, 5), min_size=0, max_size=6)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
@FUZZ
@given(shape=SHAPES, dtype=DTYPES, v_shape=SHAPES, transpose=st.booleans(), codec=st.sampled_from(
    ["raw", "quant", "cachegen", "video", "kvtc", "nope", ""]), level=st.sampled_from([None, "", "8", "4", "x", "99"]),
    pos_begin=st.integers(-3, 1 << 33), special=st.sampled_from([None, np.nan, np.inf, 1e6]))
def test_arrays_and_arguments_into_encode(shape, dtype, v_shape, transpose, codec, level, pos_begin, special):
    k = np.ones(shape, dtype=dtype)
    v = np.ones(v_shape if len(v_shape) == 4 else shape, dtype=dtype)
    if special is not None and k.size and np.issubdtype(dtype, np.floating):
        k.flat[0] = special
    if transpose and k.ndim >= 2:
        k = k.swapaxes(0, 1)
    data = either_works_or_raises_error(kvcodec.encode, k, v, codec, level, pos_begin=pos_begin)
    if data is not None:
        k2, v2 = kvcodec.decode(data)
        assert k2.shape == k.shape


@FUZZ
@given(model=st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=40)),
       tokens=st.lists(st.integers(-(1 << 40), 1 << 40), max_size=600), chunk=st.integers(-2, 300),
       name=st.text(max_size=80), codec=st.text(max_size=12), level=st.text(max_size=12))
def test_keys_names_and_store_calls(model, tokens, chunk, name, codec, level):
    keys = either_works_or_raises_error(kvcodec.chunk_keys, model, tokens, chunk)
    if keys:
        either_works_or_raises_error(kvcodec.chunk_object_name, keys[0], codec, level)
    store = kvcodec.Store("mem://")
    for call, args in ((store.put, (name, b"x")), (store.get, (name,)), (store.exists, (name,)),
                       (store.delete, (name,))):
        either_works_or_raises_error(call, *args)


@FUZZ
@given(url=st.one_of(st.text(max_size=60), st.sampled_from(
    ["mem://", "dir://", "redis://", "redis://:0", "redis://127.0.0.1:1", "redis-cluster://",
     "redis-cluster://a:b,c", "mem://x?y"]).filter(lambda u: not u.startswith("dir://") or u == "dir://")))
def test_store_urls(url):
    either_works_or_raises_error(kvcodec.Store, url, timeout_ms=50)
