"""The vLLM paged-cache adapter and the LMCache-shaped serde."""

import numpy as np
import pytest

import kvcodec
from kvcodec import lmcache, vllm

LAYERS, BLOCKS, BLOCK, HEADS, DIM = 3, 10, 16, 2, 8


def paged(layout, rng):
    shape = {"NHD": (BLOCKS, 2, BLOCK, HEADS, DIM), "HND": (BLOCKS, 2, HEADS, BLOCK, DIM),
             "kv_first": (2, BLOCKS, BLOCK, HEADS, DIM)}[layout]
    return [rng.standard_normal(shape).astype(np.float16) for _ in range(LAYERS)]


def token_row(cache, layout, kind, block, offset):
    if layout == "NHD":
        return cache[block, kind, offset]
    if layout == "HND":
        return cache[block, kind, :, offset]
    return cache[kind, block, offset]


@pytest.mark.parametrize("layout", vllm.LAYOUTS)
def test_gather_reads_each_token_from_its_block(layout):
    rng = np.random.default_rng(0)
    caches = paged(layout, rng)
    table = [7, 2, 9]
    k, v = vllm.gather(caches, table, 40, layout=layout)
    assert k.shape == (LAYERS, 40, HEADS, DIM) and v.shape == k.shape
    for layer in range(LAYERS):
        for t in (0, 15, 16, 31, 32, 39):
            block, offset = table[t // BLOCK], t % BLOCK
            assert np.array_equal(k[layer, t], token_row(caches[layer], layout, 0, block, offset))
            assert np.array_equal(v[layer, t], token_row(caches[layer], layout, 1, block, offset))


@pytest.mark.parametrize("layout", vllm.LAYOUTS)
def test_scatter_writes_the_sequence_and_nothing_else(layout):
    rng = np.random.default_rng(1)
    source = paged(layout, rng)
    k, v = vllm.gather(source, [1, 4, 6], 37, layout=layout)
    target = paged(layout, rng)
    before = [c.copy() for c in target]
    vllm.scatter(k, v, target, [8, 0, 3], layout=layout)
    k2, v2 = vllm.gather(target, [8, 0, 3], 37, layout=layout)
    assert np.array_equal(k2, k) and np.array_equal(v2, v)
    for layer in range(LAYERS):
        changed = np.argwhere(target[layer] != before[layer])
        kv_dim, block_dim, token_dim = {"NHD": (1, 0, 2), "HND": (1, 0, 3), "kv_first": (0, 1, 2)}[layout]
        for index in changed:
            block, offset = int(index[block_dim]), int(index[token_dim])
            slot = [8, 0, 3].index(block) * BLOCK + offset
            assert slot < 37  # only the sequence's own slots change


def test_paged_cache_through_a_codec_and_back():
    rng = np.random.default_rng(2)
    caches = paged("NHD", rng)
    k, v = vllm.gather(caches, [5, 1], 20)
    k2, v2 = kvcodec.decode(kvcodec.encode(k, v, "quant", "8"))
    target = [np.zeros_like(c) for c in caches]
    vllm.scatter(k2, v2, target, [3, 9])
    k3, _ = vllm.gather(target, [3, 9], 20)
    assert np.array_equal(k3, k2)
    assert float(np.abs(k3.astype(np.float32) - k).max()) < 0.05


def test_gather_refuses_what_does_not_fit():
    caches = paged("NHD", np.random.default_rng(3))
    with pytest.raises(ValueError, match="do not fit"):
        vllm.gather(caches, [0, 1], 33)
    with pytest.raises(ValueError, match="block id"):
        vllm.gather(caches, [0, BLOCKS], 20)
    with pytest.raises(ValueError, match="layout"):
        vllm.gather(caches, [0], 4, layout="kv_first")


@pytest.mark.parametrize("fmt", lmcache.FORMATS)
def test_serde_round_trip_keeps_shape_and_values(fmt):
    rng = np.random.default_rng(4)
    shape = (LAYERS, 2, 24, HEADS, DIM) if fmt == "vllm" else (LAYERS, 2, HEADS, 24, DIM)
    blob = rng.standard_normal(shape).astype(np.float16)
    data = lmcache.KvcodecSerializer("quant", "8", fmt=fmt).to_bytes(blob)
    info = kvcodec.inspect(data)
    assert (info["n_layers"], info["n_tokens"], info["n_kv_heads"], info["head_dim"]) == (LAYERS, 24, HEADS, DIM)
    back = lmcache.KvcodecDeserializer(fmt=fmt, framework="numpy").from_bytes(data)
    assert back.shape == blob.shape and back.dtype == blob.dtype
    assert float(np.abs(back.astype(np.float32) - blob).max()) < 0.05


def test_torch_tensors_round_trip_in_every_dtype():
    torch = pytest.importorskip("torch")
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        k = torch.randn(2, 32, 2, 16).to(dtype)
        v = torch.randn(2, 32, 2, 16).to(dtype)
        k2, v2 = kvcodec.decode(kvcodec.encode(k, v, "raw"), framework="torch")
        # raw is the fp16 baseline: other dtypes come back as their fp16 rounding, in their dtype.
        assert k2.dtype == dtype and v2.dtype == dtype
        assert torch.equal(k2, k.to(torch.float16).to(dtype)) and torch.equal(v2, v.to(torch.float16).to(dtype))


def test_vllm_torch_paged_cache():
    torch = pytest.importorskip("torch")
    caches = [torch.randn(BLOCKS, 2, BLOCK, HEADS, DIM, dtype=torch.bfloat16) for _ in range(LAYERS)]
    k, v = vllm.gather(caches, [4, 2], 30)
    assert k.dtype == torch.bfloat16 and k.shape == (LAYERS, 30, HEADS, DIM)
    target = [torch.zeros_like(c) for c in caches]
    vllm.scatter(k, v, target, [1, 7])
    assert torch.equal(vllm.gather(target, [1, 7], 30)[1], v)
