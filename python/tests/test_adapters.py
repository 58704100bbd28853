"""The vLLM paged-cache adapter and the LMCache serde, against tensors and objects made the way the
current upstream code makes them.

vLLM (github.com/vllm-project/vllm):
- vllm/v1/attention/backends/flash_attn.py, FlashAttentionBackend.get_kv_cache_shape ->
  (2, num_blocks, block_size, num_kv_heads, head_size); get_kv_cache_stride_order: NHD
  (0, 1, 2, 3, 4), HND (0, 1, 3, 2, 4); with include_num_layers_dimension NHD (2, 0, 1, 3, 4, 5),
  HND (2, 4, 0, 1, 3, 5).
- vllm/v1/attention/backends/flashinfer.py, FlashInferBackend.get_kv_cache_shape ->
  (num_blocks, 2, block_size, num_kv_heads, head_size); stride order NHD (0, 1, 2, 3, 4), HND
  (0, 1, 3, 2, 4) (vllm/v1/attention/backends/triton_attn.py declares the same, and with
  include_num_layers_dimension NHD (1, 0, 2, 3, 4, 5), HND (1, 4, 0, 2, 3, 5)).
- vllm/v1/attention/backends/mla/common.py, MLACommonBackend.get_kv_cache_shape ->
  (num_blocks, block_size, head_size).
- vllm/v1/worker/gpu_model_runner.py, GPUModelRunner._reshape_kv_cache_tensors: each layer's int8
  buffer .view(dtype).view(shape permuted by the stride order).permute(inverse order); with a
  padded page size the blocks axis gets the page stride through torch.as_strided.
- vllm/v1/worker/kv_connector_model_runner_mixin.py, allocate_uniform_kv_caches: one buffer for
  all layers in the include_num_layers_dimension order, permuted back, layer i = view[i].
- Writes: FlashAttentionImpl unbinds kv_cache along axis 0, FlashInfer takes kv_cache[:, 0] and
  kv_cache[:, 1]; reshape_and_cache_flash stores token t at key_cache[slot // block_size,
  slot % block_size]; MLA's concat_and_cache_mla stores [kv_c | k_pe] at kv_cache[block, offset].
"""

from __future__ import annotations

import dataclasses
import enum
import math
import sys
import threading
import types

import numpy as np
import pytest

import kvcodec
from kvcodec import lmcache, vllm

torch = pytest.importorskip("torch")

LAYERS, BLOCKS, BLOCK, HEADS, DIM = 3, 10, 16, 16, 8  # 16 heads of 16-token blocks: the issue's case
TABLE = [7, 2, 9]
TOKENS = 40

SHAPES = {"flash_attn": (2, BLOCKS, BLOCK, HEADS, DIM), "flashinfer": (BLOCKS, 2, BLOCK, HEADS, DIM)}
ORDERS = {"NHD": (0, 1, 2, 3, 4), "HND": (0, 1, 3, 2, 4)}
CROSS_LAYER_ORDERS = {
    ("flash_attn", "NHD"): (2, 0, 1, 3, 4, 5),
    ("flash_attn", "HND"): (2, 4, 0, 1, 3, 5),
    ("flashinfer", "NHD"): (1, 0, 2, 3, 4, 5),
    ("flashinfer", "HND"): (1, 4, 0, 2, 3, 5),
}
CASES = [(b, l) for b in ("flash_attn", "flashinfer") for l in ("NHD", "HND")]


def inverse(order):
    return [order.index(i) for i in range(len(order))]


def reshape_kv_cache_tensors(shape, order, dtype=torch.float16, layers=LAYERS):
    """Per layer, as GPUModelRunner._reshape_kv_cache_tensors: (raw int8 buffers, layer views)."""
    physical = tuple(shape[i] for i in order)
    itemsize = torch.empty((), dtype=dtype).element_size()
    raws = [torch.zeros(math.prod(shape) * itemsize, dtype=torch.int8) for _ in range(layers)]
    return raws, [raw.view(dtype).view(physical).permute(*inverse(order)) for raw in raws]


def allocate_uniform_kv_caches(shape, order, dtype=torch.float16, layers=LAYERS):
    """As allocate_uniform_kv_caches: (the one buffer in physical order, the layers' views)."""
    full = (layers,) + shape
    itemsize = torch.empty((), dtype=dtype).element_size()
    buf = torch.zeros(math.prod(full) * itemsize, dtype=torch.int8).view(dtype).view(tuple(full[i] for i in order))
    permuted = buf.permute(*inverse(order))
    return buf, [permuted[i] for i in range(layers)]


def kv_views(cache, backend):
    """(key_cache, value_cache) as the backend's forward hands them to reshape_and_cache_flash."""
    return cache.unbind(0) if backend == "flash_attn" else (cache[:, 0], cache[:, 1])


def slot(t, table=TABLE):
    return table[t // BLOCK] * BLOCK + t % BLOCK


def reshape_and_cache(cache, backend, k, v, table=TABLE):
    """Stores k, v [tokens, heads, dim] token by token at the sequence's slots."""
    key_cache, value_cache = kv_views(cache, backend)
    for t in range(k.shape[0]):
        key_cache[slot(t, table) // BLOCK, slot(t, table) % BLOCK] = k[t]
        value_cache[slot(t, table) // BLOCK, slot(t, table) % BLOCK] = v[t]


def known_tokens(layers=LAYERS, tokens=TOKENS, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(layers, tokens, HEADS, DIM, generator=g).to(dtype)
    v = torch.randn(layers, tokens, HEADS, DIM, generator=g).to(dtype)
    return k, v


@pytest.mark.parametrize("backend,layout", CASES)
def test_gather_returns_the_tokens_vllm_wrote(backend, layout):
    raws, caches = reshape_kv_cache_tensors(SHAPES[backend], ORDERS[layout])
    assert tuple(caches[0].shape) == SHAPES[backend]  # the logical shape, whatever the layout
    k, v = known_tokens()
    for layer, cache in enumerate(caches):
        reshape_and_cache(cache, backend, k[layer], v[layer])
    assert vllm.describe(caches[0]) == vllm.PagedCache(backend, layout, BLOCKS, BLOCK, HEADS, DIM)
    k2, v2 = vllm.gather(caches, TABLE, TOKENS)
    assert torch.equal(k2, k) and torch.equal(v2, v)
    # The bytes sit where the backend's kernels read them: in the physical (stride-order) layout.
    physical = raws[1].view(torch.float16).view(tuple(SHAPES[backend][i] for i in ORDERS[layout]))
    t = 37
    block, offset = TABLE[t // BLOCK], t % BLOCK
    kv_block = (0, block) if backend == "flash_attn" else (block, 0)
    token_row = physical[kv_block][:, offset] if layout == "HND" else physical[kv_block][offset]
    assert torch.equal(token_row, k[1, t])


@pytest.mark.parametrize("backend,layout", CASES)
def test_scatter_writes_where_vllm_reads_and_nowhere_else(backend, layout):
    raws, caches = reshape_kv_cache_tensors(SHAPES[backend], ORDERS[layout])
    k, v = known_tokens(seed=1)
    k, v = k.abs() + 1, v.abs() + 1  # no zeros: every written element is visible
    table = [4, 0, 8]
    vllm.scatter(k, v, caches, table)
    # A fresh view of the same buffers, made as vLLM makes it, reads the tokens back.
    fresh = [raw.view(torch.float16).view(tuple(SHAPES[backend][i] for i in ORDERS[layout]))
             .permute(*inverse(ORDERS[layout])) for raw in raws]
    for layer in range(LAYERS):
        key_cache, value_cache = kv_views(fresh[layer], backend)
        for t in (0, 15, 16, 31, 32, 39):
            assert torch.equal(key_cache[slot(t, table) // BLOCK, slot(t, table) % BLOCK], k[layer, t])
            assert torch.equal(value_cache[slot(t, table) // BLOCK, slot(t, table) % BLOCK], v[layer, t])
        assert int((raws[layer].view(torch.float16) != 0).sum()) == 2 * TOKENS * HEADS * DIM


def test_the_issue_case_hnd_flashinfer_is_not_read_as_nhd():
    """16 heads, 16-token blocks, FlashInfer HND: the strides, not the shape, say where token t is."""
    _, caches = reshape_kv_cache_tensors(SHAPES["flashinfer"], ORDERS["HND"])
    k, v = known_tokens(seed=2)
    for layer, cache in enumerate(caches):
        reshape_and_cache(cache, "flashinfer", k[layer], v[layer])
    assert torch.equal(vllm.gather(caches, TABLE, TOKENS, layout="HND")[0], k)
    with pytest.raises(ValueError, match="layout='NHD' does not match"):
        vllm.gather(caches, TABLE, TOKENS, layout="NHD")
    # The old API's "HND" meant a contiguous [num_blocks, 2, heads, block_size, dim] tensor; vLLM
    # never makes one, and its strides are NHD's: asking for HND is refused, not misread.
    contiguous = [c.contiguous() for c in caches]
    with pytest.raises(ValueError, match="layout='HND' does not match"):
        vllm.gather(contiguous, TABLE, TOKENS, layout="HND")


@pytest.mark.parametrize("backend,layout", CASES)
def test_cross_layer_allocation(backend, layout):
    buf, caches = allocate_uniform_kv_caches(SHAPES[backend], CROSS_LAYER_ORDERS[(backend, layout)])
    assert tuple(caches[0].shape) == SHAPES[backend]
    k, v = known_tokens(seed=3)
    for layer, cache in enumerate(caches):
        reshape_and_cache(cache, backend, k[layer], v[layer])
    assert vllm.describe(caches[2]).layout == layout
    k2, v2 = vllm.gather(caches, TABLE, TOKENS)
    assert torch.equal(k2, k) and torch.equal(v2, v)
    # Scattering one layer leaves the other layers' data, interleaved in the same buffer, alone.
    before = buf.clone()
    vllm.scatter(k[1:2] * 2, v[1:2] * 2, caches[1:2], TABLE)
    assert torch.equal(vllm.gather(caches[1:2], TABLE, TOKENS)[0], k[1:2] * 2)
    assert torch.equal(vllm.gather(caches[0:1], TABLE, TOKENS)[1], v[0:1])
    assert int((buf != before).sum()) == 2 * TOKENS * HEADS * DIM


def test_padded_pages():
    """_reshape_kv_cache_tensors with page_size_padded: as_strided with the page stride on the blocks axis."""
    shape, order = SHAPES["flashinfer"], ORDERS["HND"]
    physical = tuple(shape[i] for i in order)
    page_stride = 2 * BLOCK * HEADS * DIM + 64
    strides = list(torch.empty(physical).stride())
    strides[inverse(order)[0]] = page_stride
    raw = torch.zeros(BLOCKS * page_stride, dtype=torch.float16)
    cache = torch.as_strided(raw, size=physical, stride=tuple(strides)).permute(*inverse(order))
    k, v = known_tokens(layers=1, seed=4)
    reshape_and_cache(cache, "flashinfer", k[0], v[0])
    k2, v2 = vllm.gather([cache], TABLE, TOKENS)
    assert torch.equal(k2, k) and torch.equal(v2, v)


def test_mla_latent_is_k_and_v_halves():
    """MLA: one [kv_c | k_pe] latent per token (concat_and_cache_mla), no V."""
    kv_lora_rank, rope_dim = 512, 64
    shape = (BLOCKS, BLOCK, kv_lora_rank + rope_dim)
    raws, caches = reshape_kv_cache_tensors(shape, (0, 1, 2), dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(5)
    latent = torch.randn(LAYERS, TOKENS, kv_lora_rank + rope_dim, generator=g).to(torch.bfloat16)
    for layer, cache in enumerate(caches):
        for t in range(TOKENS):
            cache[slot(t) // BLOCK, slot(t) % BLOCK] = torch.cat([latent[layer, t, :kv_lora_rank],
                                                                  latent[layer, t, kv_lora_rank:]])
    assert vllm.describe(caches[0]) == vllm.PagedCache("mla", "NHD", BLOCKS, BLOCK, 1, 288)
    k, v = vllm.gather(caches, TABLE, TOKENS)
    assert k.shape == (LAYERS, TOKENS, 1, 288) and k.dtype == torch.bfloat16
    assert torch.equal(torch.cat([k[:, :, 0], v[:, :, 0]], dim=-1), latent)
    k2, v2 = kvcodec.decode(kvcodec.encode(k, v, "planes"), framework="torch")  # lossless
    _, target = reshape_kv_cache_tensors(shape, (0, 1, 2), dtype=torch.bfloat16)
    vllm.scatter(k2, v2, target, [1, 3, 5])
    for t in (0, 17, 39):
        assert torch.equal(target[2][[1, 3, 5][t // BLOCK], t % BLOCK], latent[2, t])


def test_numpy_caches():
    """numpy arrays: strides in bytes, the HND permutation through np.transpose."""
    rng = np.random.default_rng(6)
    physical = rng.standard_normal((BLOCKS, 2, HEADS, BLOCK, DIM)).astype(np.float16)
    cache = physical.transpose(0, 1, 3, 2, 4)  # flashinfer HND, logical shape
    assert vllm.describe(cache).layout == "HND"
    k, v = vllm.gather([cache], TABLE, TOKENS)
    assert k.shape == (1, TOKENS, HEADS, DIM)
    assert np.array_equal(k[0, 37], physical[TABLE[2], 0, :, 37 % BLOCK])
    assert np.array_equal(v[0, 3], physical[TABLE[0], 1, :, 3])
    target = np.zeros_like(physical).transpose(0, 1, 3, 2, 4)
    vllm.scatter(k, v, [target], [5, 6, 1])
    k2, v2 = vllm.gather([target], [5, 6, 1], TOKENS)
    assert np.array_equal(k2, k) and np.array_equal(v2, v)


def test_paged_cache_through_a_codec_and_back():
    _, caches = reshape_kv_cache_tensors(SHAPES["flash_attn"], ORDERS["HND"])
    k, v = known_tokens(seed=7)
    for layer, cache in enumerate(caches):
        reshape_and_cache(cache, "flash_attn", k[layer], v[layer])
    k2, v2 = kvcodec.decode(kvcodec.encode(*vllm.gather(caches, TABLE, TOKENS), "quant", "8"), framework="torch")
    _, target = reshape_kv_cache_tensors(SHAPES["flash_attn"], ORDERS["HND"])
    vllm.scatter(k2, v2, target, [3, 9, 0])
    k3, _ = vllm.gather(target, [3, 9, 0], TOKENS)
    assert torch.equal(k3, k2)
    assert float((k3.float() - k.float()).abs().max()) < 0.05


def test_refusals():
    _, caches = reshape_kv_cache_tensors(SHAPES["flashinfer"], ORDERS["NHD"])
    with pytest.raises(ValueError, match="do not fit"):
        vllm.gather(caches, [0, 1], 2 * BLOCK + 1)
    with pytest.raises(ValueError, match="block id 10 is outside"):
        vllm.gather(caches, [0, BLOCKS], 20)
    with pytest.raises(ValueError, match="block id -1"):
        vllm.gather(caches, [-1], 4)
    with pytest.raises(ValueError, match="twice"):
        vllm.gather(caches, [3, 3], 20)
    assert vllm.gather(caches, [3, BLOCKS + 5], BLOCK)[0].shape[1] == BLOCK  # unused padding entries
    with pytest.raises(ValueError, match="5 dimensions"):
        vllm.gather([c[0] for c in caches], [0], 4)
    with pytest.raises(ValueError, match="not the flash_attn backend's declared layout"):
        vllm.gather(caches, [0], 4, backend="flash_attn")
    with pytest.raises(ValueError, match="layout must be one of"):
        vllm.gather(caches, [0], 4, layout="kv_first")
    with pytest.raises(ValueError, match="not a dict"):
        vllm.gather({"layer.0": caches[0]}, [0], 4)
    # head_size not innermost: no backend declares that order.
    swapped = [c.transpose(3, 4).contiguous().transpose(3, 4) for c in caches]
    with pytest.raises(ValueError, match="declared layout"):
        vllm.gather(swapped, [0], 4)
    with pytest.raises(ValueError, match="layer 1 differs"):
        vllm.gather([caches[0], caches[1].to(torch.bfloat16)], [0], 4)
    k, v = known_tokens(layers=2)
    with pytest.raises(ValueError, match="must both be"):
        vllm.scatter(k, v, caches, TABLE)
    _, mla_odd = reshape_kv_cache_tensors((BLOCKS, BLOCK, 575), (0, 1, 2), layers=1)
    with pytest.raises(ValueError, match="odd size"):
        vllm.gather(mla_odd, [0], 4)


def test_two_blocks_fit_both_backends_and_need_backend():
    shape = (2, 2, BLOCK, HEADS, DIM)
    _, caches = reshape_kv_cache_tensors(shape, ORDERS["NHD"], layers=1)
    with pytest.raises(ValueError, match="pass backend="):
        vllm.gather(caches, [1], 4)
    k, v = known_tokens(layers=1, tokens=4)
    reshape_and_cache(caches[0], "flash_attn", k[0], v[0], table=[1])
    assert torch.equal(vllm.gather(caches, [1], 4, backend="flash_attn")[0], k)
    assert vllm.describe(caches[0], backend="triton_attn").backend == "flashinfer"


# ---------------------------------------------------------------------------------------------
# LMCache. It is not installable here, so these stand-ins reproduce the upstream attributes the
# serde uses (github.com/LMCache/LMCache):
# - lmcache/v1/memory_management.py: MemoryFormat (UNDEFINED=0, KV_2LTD, KV_T2D, KV_2TD, BINARY,
#   BINARY_BUFFER, KV_MLA_FMT), MemoryObjMetadata, TensorMemoryObj (raw_data viewed as
#   meta.dtype / meta.shape), BytesBufferMemoryObj (shape [len, 0, 0, 0], BINARY_BUFFER).
# - lmcache/v1/storage_backend/naive_serde/serde.py: Serializer.serialize(memory_obj) ->
#   MemoryObj, Deserializer.deserialize(memory_obj) -> Optional[MemoryObj].
# - lmcache/v1/storage_backend/naive_serde/__init__.py: CreateSerde(serde_type, metadata, config),
#   ValueError for an unknown name.
# - lmcache/v1/storage_backend/remote_backend.py: `from ...naive_serde import CreateSerde`, then
#   CreateSerde(config.remote_serde, metadata, config) in RemoteBackend.__init__; put serializes,
#   get_blocking deserializes what the connector returns.
# - lmcache/v1/metadata.py (LMCacheMetadata) / lmcache/config.py (LMCacheEngineMetadata): kv_dtype,
#   kv_shape = (num_layers, 2, chunk_size, num_kv_heads, head_size), use_mla.
# ---------------------------------------------------------------------------------------------


class MemoryFormat(enum.Enum):
    UNDEFINED = 0
    KV_2LTD = enum.auto()
    KV_T2D = enum.auto()
    KV_2TD = enum.auto()
    BINARY = enum.auto()
    BINARY_BUFFER = enum.auto()
    KV_MLA_FMT = enum.auto()


@dataclasses.dataclass
class MemoryObjMetadata:
    shape: object
    dtype: object
    address: int
    phy_size: int
    ref_count: int
    is_pin: bool = False
    fmt: MemoryFormat = MemoryFormat.UNDEFINED


class TensorMemoryObj:
    def __init__(self, raw_data, metadata, parent_allocator=None):
        self.raw_data, self.meta, self.parent_allocator, self.valid = raw_data, metadata, parent_allocator, True
        self.lock = threading.Lock()

    def get_memory_format(self):
        return self.meta.fmt

    def get_shape(self):
        return self.meta.shape

    def get_dtype(self):
        return self.meta.dtype

    @property
    def metadata(self):
        return self.meta

    @property
    def tensor(self):
        return self.raw_data.view(self.meta.dtype).view(self.meta.shape) if self.valid else None


class BytesBufferMemoryObj:
    def __init__(self, raw_bytes, metadata=None):
        self.raw_data = raw_bytes
        self.meta = metadata or MemoryObjMetadata(shape=torch.Size([len(raw_bytes), 0, 0, 0]), dtype=None, address=0,
                                                  phy_size=0, ref_count=1, fmt=MemoryFormat.BINARY_BUFFER)

    def get_memory_format(self):
        return self.meta.fmt

    def get_size(self):
        return len(self.raw_data)

    @property
    def tensor(self):
        return None

    @property
    def byte_array(self):
        return self.raw_data


class NaiveSerializer:
    def serialize(self, memory_obj):
        return memory_obj


class NaiveDeserializer:
    def deserialize(self, memory_obj):
        return memory_obj


def create_serde_upstream(serde_type, metadata, config):
    if serde_type == "naive":
        return NaiveSerializer(), NaiveDeserializer()
    raise ValueError(f"Invalid type: {serde_type}")


@dataclasses.dataclass
class EngineMetadata:
    kv_dtype: object
    kv_shape: tuple
    model_name: str = "kvtiny"
    use_mla: bool = False


@dataclasses.dataclass
class EngineConfig:
    remote_serde: str = "naive"
    extra_config: dict | None = None
    chunk_size: int = 256


@pytest.fixture
def upstream(monkeypatch):
    """Installs the stand-in lmcache package; remote_backend binds CreateSerde at import, as upstream."""
    modules = {name: types.ModuleType(name) for name in (
        "lmcache", "lmcache.v1", "lmcache.v1.memory_management", "lmcache.v1.storage_backend",
        "lmcache.v1.storage_backend.naive_serde", "lmcache.v1.storage_backend.remote_backend")}
    mm = modules["lmcache.v1.memory_management"]
    mm.MemoryFormat, mm.MemoryObjMetadata = MemoryFormat, MemoryObjMetadata
    mm.TensorMemoryObj, mm.BytesBufferMemoryObj = TensorMemoryObj, BytesBufferMemoryObj
    modules["lmcache.v1.storage_backend.naive_serde"].CreateSerde = create_serde_upstream
    remote = modules["lmcache.v1.storage_backend.remote_backend"]
    remote.CreateSerde = modules["lmcache.v1.storage_backend.naive_serde"].CreateSerde
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return modules


class RemoteBackend:
    """remote_backend.RemoteBackend's serde path over an in-memory connector that, like LMCache's
    connectors, stores the serialized object's bytes and rebuilds a BytesBufferMemoryObj on get."""

    def __init__(self, remote_module, config, metadata):
        self.serializer, self.deserializer = remote_module.CreateSerde(config.remote_serde, metadata, config)
        self.store = {}

    def put(self, key, memory_obj):
        self.store[key] = bytes(self.serializer.serialize(memory_obj).byte_array)

    def get_blocking(self, key):
        return self.deserializer.deserialize(BytesBufferMemoryObj(bytearray(self.store[key])))


def kv_2ltd(layers=LAYERS, tokens=24, heads=2, head_size=DIM, dtype=torch.float16, seed=8):
    """A KV_2LTD chunk as LMCache's allocator hands it out: a flat uint8 buffer viewed by the metadata."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(2, layers, tokens, heads * head_size, generator=g).to(dtype)
    raw = torch.zeros(values.numel() * values.element_size(), dtype=torch.uint8)
    meta = MemoryObjMetadata(shape=values.shape, dtype=dtype, address=0, phy_size=raw.numel(), ref_count=1,
                             fmt=MemoryFormat.KV_2LTD)
    obj = TensorMemoryObj(raw, meta)
    obj.tensor.copy_(values)
    return obj, values


def test_serialize_then_deserialize(upstream):
    chunk, values = kv_2ltd()
    meta = EngineMetadata(kv_dtype=torch.float16, kv_shape=(LAYERS, 2, 256, 2, DIM))
    stored = lmcache.KvcodecSerializer("raw", metadata=meta).serialize(chunk)
    assert isinstance(stored, BytesBufferMemoryObj) and stored.get_memory_format() == MemoryFormat.BINARY_BUFFER
    info = kvcodec.inspect(stored.byte_array)
    assert (info["codec"], info["n_layers"], info["n_tokens"], info["n_kv_heads"], info["head_dim"]) == (
        "raw", LAYERS, 24, 2, DIM)
    back = lmcache.KvcodecDeserializer(metadata=meta).deserialize(stored)
    assert isinstance(back, TensorMemoryObj) and back.get_memory_format() == MemoryFormat.KV_2LTD
    assert back.get_shape() == values.shape and back.get_dtype() == torch.float16
    assert torch.equal(back.tensor, values)  # raw is exact for fp16
    # K of layer 1, head 1 is the chunk's K of layer 1, channels [DIM, 2*DIM).
    assert torch.equal(kvcodec.decode(stored.byte_array, framework="torch")[0][1, :, 1], values[0, 1, :, DIM:])


def test_register_selects_kvcodec_through_the_config(upstream):
    remote = upstream["lmcache.v1.storage_backend.remote_backend"]
    meta = EngineMetadata(kv_dtype=torch.bfloat16, kv_shape=(LAYERS, 2, 256, 2, DIM))
    with pytest.raises(ValueError, match="Invalid type"):
        RemoteBackend(remote, EngineConfig(remote_serde="kvcodec"), meta)
    lmcache.register()
    lmcache.register()  # harmless twice
    assert remote.CreateSerde is upstream["lmcache.v1.storage_backend.naive_serde"].CreateSerde
    config = EngineConfig(remote_serde="kvcodec", extra_config={"kvcodec_codec": "quant", "kvcodec_level": "8"})
    backend = RemoteBackend(remote, config, meta)
    assert isinstance(backend.serializer, lmcache.KvcodecSerializer)
    chunk, values = kv_2ltd(dtype=torch.bfloat16)
    backend.put("chunk-0", chunk)
    assert kvcodec.inspect(backend.store["chunk-0"])["level"] == "8"
    back = backend.get_blocking("chunk-0")
    assert back.get_dtype() == torch.bfloat16 and back.get_shape() == values.shape
    assert float((back.tensor.float() - values.float()).abs().max()) < 0.05
    assert isinstance(RemoteBackend(remote, EngineConfig(), meta).serializer, NaiveSerializer)  # others unchanged


def test_serde_refusals(upstream):
    meta = EngineMetadata(kv_dtype=torch.float16, kv_shape=(LAYERS, 2, 256, 2, DIM))
    serializer = lmcache.KvcodecSerializer("raw", metadata=meta)
    chunk, _ = kv_2ltd(heads=4)
    with pytest.raises(ValueError, match="hidden size 32 is not num_heads 2 x head_size 8"):
        serializer.serialize(chunk)
    chunk.meta.fmt = MemoryFormat.KV_MLA_FMT
    with pytest.raises(ValueError, match="KV_2LTD"):
        serializer.serialize(chunk)
    with pytest.raises(ValueError, match="differ from metadata"):
        lmcache.KvcodecSerializer(num_heads=4, head_size=DIM, metadata=meta)
    with pytest.raises(ValueError, match="MLA"):
        lmcache.create_serde(EngineMetadata(torch.float16, (LAYERS, 1, 256, 1, 576), use_mla=True), EngineConfig())
    deserializer = lmcache.KvcodecDeserializer(metadata=meta)
    assert deserializer.deserialize(BytesBufferMemoryObj(b"not a kvc file")) is None
    good, _ = kv_2ltd()
    damaged = bytearray(serializer.serialize(good).byte_array)
    damaged[len(damaged) // 2] ^= 0x10
    assert deserializer.deserialize(BytesBufferMemoryObj(damaged)) is None  # the CRCs catch it
    other, _ = kv_2ltd(heads=4)
    stored = lmcache.KvcodecSerializer("raw", num_heads=4, head_size=DIM).serialize(other)
    assert deserializer.deserialize(stored) is None  # 4 heads where LMCache expects 2


def test_serialize_without_lmcache_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "lmcache", None)
    with pytest.raises(ImportError, match="need LMCache"):
        lmcache.KvcodecSerializer("raw", num_heads=2, head_size=DIM).serialize(object())
    with pytest.raises(ImportError):
        lmcache.register()


def test_vllm_general_plugin_registers_only_where_lmcache_is(upstream, monkeypatch):
    lmcache.vllm_general_plugin()
    backend = RemoteBackend(upstream["lmcache.v1.storage_backend.remote_backend"], EngineConfig(remote_serde="kvcodec"),
                            EngineMetadata(kv_dtype=torch.float16, kv_shape=(LAYERS, 2, 256, 2, DIM)))
    assert isinstance(backend.deserializer, lmcache.KvcodecDeserializer)
    for name in list(sys.modules):
        if name == "lmcache" or name.startswith("lmcache."):
            monkeypatch.setitem(sys.modules, name, None)
    lmcache.vllm_general_plugin()  # no LMCache: nothing to do, no error
    with pytest.raises(ImportError):
        lmcache.register()


@pytest.mark.parametrize("fmt", lmcache.FORMATS)
def test_2024_to_bytes_from_bytes(fmt):
    rng = np.random.default_rng(9)
    shape = (LAYERS, 2, 24, 2, DIM) if fmt == "vllm" else (LAYERS, 2, 2, 24, DIM)
    blob = rng.standard_normal(shape).astype(np.float16)
    data = lmcache.KvcodecSerializer("quant", "8", fmt=fmt).to_bytes(blob)
    info = kvcodec.inspect(data)
    assert (info["n_layers"], info["n_tokens"], info["n_kv_heads"], info["head_dim"]) == (LAYERS, 24, 2, DIM)
    back = lmcache.KvcodecDeserializer(fmt=fmt, framework="numpy").from_bytes(data)
    assert back.shape == blob.shape and back.dtype == blob.dtype
    assert float(np.abs(back.astype(np.float32) - blob).max()) < 0.05


def test_torch_tensors_round_trip_in_every_dtype():
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        k = torch.randn(2, 32, 2, 16).to(dtype)
        v = torch.randn(2, 32, 2, 16).to(dtype)
        k2, v2 = kvcodec.decode(kvcodec.encode(k, v, "raw"), framework="torch")
        # raw is the fp16 baseline: other dtypes come back as their fp16 rounding, in their dtype.
        assert k2.dtype == dtype and v2.dtype == dtype
        assert torch.equal(k2, k.to(torch.float16).to(dtype)) and torch.equal(v2, v.to(torch.float16).to(dtype))
