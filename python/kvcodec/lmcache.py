"""kvcodec as an LMCache serde: LMCache's remote backend then stores kvcodec's .kvc files.

Current LMCache (lmcache/v1/storage_backend/naive_serde/serde.py) has a serde take and give
memory objects: ``Serializer.serialize(memory_obj) -> MemoryObj`` gets a chunk in the KV_2LTD
format, a tensor [2, num_layers, num_tokens, num_heads * head_size] (K then V), and returns the
bytes to store; ``Deserializer.deserialize(memory_obj) -> Optional[MemoryObj]`` gets those bytes
back and returns the KV_2LTD chunk. ``KvcodecSerializer`` and ``KvcodecDeserializer`` are that
pair: one .kvc file per chunk, carried in LMCache's BytesBufferMemoryObj (format BINARY_BUFFER,
as LMCache's own CacheGen serde returns), and decoded into a TensorMemoryObj in KV_2LTD. The
memory-object classes are LMCache's own (lmcache.v1.memory_management), imported when a chunk is
first coded, so kvcodec does not depend on LMCache being installed until it is used.

LMCache picks its remote serde by name, ``remote_serde`` in its config, through the factory
``CreateSerde(serde_type, metadata, config)`` in lmcache/v1/storage_backend/naive_serde/__init__.py,
which knows only its built-in names. ``register()`` adds the name "kvcodec" to that factory in
the running process; then ``remote_serde: kvcodec`` selects it, and ``extra_config`` carries the
codec (see ``create_serde``). docs/adapters.md shows the whole configuration.

The 2024 serde shape (``to_bytes(tensor) -> bytes`` / ``from_bytes(bytes) -> tensor`` on
[num_layers, 2, num_tokens, num_heads, head_size]) is kept on the same classes.
"""

from __future__ import annotations

import importlib
import logging
import sys

import kvcodec

SERDE_NAME = "kvcodec"
FORMATS = ("vllm", "huggingface")  # the 2024 to_bytes/from_bytes tensor formats

_log = logging.getLogger("kvcodec.lmcache")


class KvcodecSerializer:
    """serialize(KV_2LTD memory object) -> BytesBufferMemoryObj holding one .kvc file.

    num_heads and head_size split the hidden axis (num_heads * head_size); they come from
    LMCache's metadata (``kv_shape`` = (num_layers, 2, chunk_size, num_heads, head_size)) or are
    given here. codec and level as in ``kvcodec.encode`` (kvtc needs ``calibration``).
    """

    def __init__(self, codec: str = "quant", level: str | None = None, *, num_heads: int | None = None,
                 head_size: int | None = None, metadata=None, calibration=None, model=None, fmt: str = "vllm"):
        if fmt not in FORMATS:
            raise ValueError(f"fmt must be one of {FORMATS}, not {fmt!r}")
        self.codec, self.level, self.calibration, self.model, self.fmt = codec, level, calibration, model, fmt
        self.num_heads, self.head_size = _heads_and_size(num_heads, head_size, metadata)

    def serialize(self, memory_obj):
        mm = _memory_management()
        fmt = memory_obj.get_memory_format()
        if fmt != mm.MemoryFormat.KV_2LTD:
            raise ValueError(f"kvcodec serializes KV_2LTD chunks, not {fmt}")
        t = memory_obj.tensor
        if t is None:
            raise ValueError("the memory object is invalidated (its tensor is None)")
        k, v = self._split(t)
        data = kvcodec.encode(k, v, self.codec, self.level, calibration=self.calibration, model=self.model)
        return mm.BytesBufferMemoryObj(data)

    def _split(self, t):
        """K and V [layers, tokens, heads, head_size] of a KV_2LTD tensor [2, layers, tokens, hidden]."""
        shape = tuple(int(d) for d in t.shape)
        if len(shape) != 4 or shape[0] != 2:
            raise ValueError(f"a KV_2LTD chunk is [2, num_layers, num_tokens, hidden], not {shape}")
        if self.num_heads is None:
            raise ValueError("the serializer needs num_heads and head_size (or LMCache's metadata)")
        if shape[3] != self.num_heads * self.head_size:
            raise ValueError(f"hidden size {shape[3]} is not num_heads {self.num_heads} x head_size {self.head_size}")
        split = (shape[1], shape[2], self.num_heads, self.head_size)
        return t[0].reshape(split), t[1].reshape(split)

    def to_bytes(self, t) -> bytes:
        """The 2024 serde: [num_layers, 2, tokens, heads, head_size] ("huggingface": heads and
        tokens swapped) to the bytes of one .kvc file."""
        if len(t.shape) != 5 or t.shape[1] != 2:
            raise ValueError(f"expected [num_layers, 2, tokens, heads, head_size], not {tuple(t.shape)}")
        k, v = t[:, 0], t[:, 1]
        if self.fmt == "huggingface":
            k, v = _swap_tokens_heads(k), _swap_tokens_heads(v)
        return kvcodec.encode(k, v, self.codec, self.level, calibration=self.calibration, model=self.model)


class KvcodecDeserializer:
    """deserialize(memory object holding a .kvc file) -> TensorMemoryObj in KV_2LTD, on the CPU.

    Returns None (LMCache's "nothing usable": the chunk is recomputed) when the bytes are not a
    .kvc file kvcodec can decode, or code another shape than LMCache's metadata names. dtype: the
    tensor's dtype (default: metadata.kv_dtype, else the dtype the chunk was encoded from).
    """

    def __init__(self, *, metadata=None, num_heads: int | None = None, head_size: int | None = None, dtype=None,
                 model=None, fmt: str = "vllm", device=None, framework: str = "torch"):
        if fmt not in FORMATS:
            raise ValueError(f"fmt must be one of {FORMATS}, not {fmt!r}")
        self.num_heads, self.head_size = _heads_and_size(num_heads, head_size, metadata)
        self.dtype = dtype if dtype is not None else getattr(metadata, "kv_dtype", None)
        self.model, self.fmt, self.device, self.framework = model, fmt, device, framework

    def deserialize(self, memory_obj):
        try:
            k, v = kvcodec.decode(_bytes_of(memory_obj.byte_array), model=self.model, framework="torch")
        except kvcodec.Error as e:
            _log.warning("kvcodec could not decode a stored chunk: %s", e)
            return None
        layers, tokens, heads, head_size = (int(d) for d in k.shape)
        if self.num_heads is not None and (heads, head_size) != (self.num_heads, self.head_size):
            _log.warning("a stored chunk has %d heads of %d, LMCache expects %d of %d", heads, head_size,
                         self.num_heads, self.head_size)
            return None
        import torch

        blob = torch.stack([k, v]).reshape(2, layers, tokens, heads * head_size)
        if self.dtype is not None:
            blob = blob.to(self.dtype)
        mm = _memory_management()
        meta = mm.MemoryObjMetadata(shape=blob.shape, dtype=blob.dtype, address=-1,
                                    phy_size=blob.numel() * blob.element_size(),
                                    ref_count=-1,  # not from an allocator: nothing to free
                                    fmt=mm.MemoryFormat.KV_2LTD)
        return mm.TensorMemoryObj(raw_data=blob, metadata=meta, parent_allocator=None)

    def from_bytes(self, data: bytes):
        """The 2024 serde: the tensor ``KvcodecSerializer.to_bytes`` was given (torch on
        ``device``, or numpy with framework="numpy")."""
        k, v = kvcodec.decode(data, framework=self.framework)
        if self.fmt == "huggingface":
            k, v = _swap_tokens_heads(k), _swap_tokens_heads(v)
        if self.framework == "torch":
            import torch

            t = torch.stack([k, v], dim=1)
            return t.to(self.device) if self.device is not None else t
        import numpy as np

        return np.stack([k, v], axis=1)


def create_serde(metadata, config):
    """(serializer, deserializer) for LMCache's engine metadata and config.

    The codec comes from ``config.extra_config``: "kvcodec_codec" (default "quant"),
    "kvcodec_level" (default: the codec's), "kvcodec_calibration" (a .kvcal path; kvtc needs
    one, and the files are then bound to its model), "kvcodec_model" (32 hex digits: bind the
    files to a model, and refuse chunks of another). LMCache serves MLA models with its naive
    serde only, and so does this one: an MLA metadata is a ValueError.
    """
    if getattr(metadata, "use_mla", False):
        raise ValueError("LMCache stores MLA chunks with its naive serde only; kvcodec does not code KV_MLA_FMT")
    extra = getattr(config, "extra_config", None) or {}
    codec = str(extra.get("kvcodec_codec", "quant"))
    level = extra.get("kvcodec_level")
    level = None if level is None else str(level)
    calibration = extra.get("kvcodec_calibration")
    calibration = None if calibration is None else kvcodec.Calibration.load(calibration)
    model = extra.get("kvcodec_model")
    if calibration is not None:
        model = calibration.model
    serializer = KvcodecSerializer(codec, level, metadata=metadata, calibration=calibration, model=model)
    deserializer = KvcodecDeserializer(metadata=metadata, model=model)
    return serializer, deserializer


def register(name: str = SERDE_NAME) -> None:
    """Makes LMCache's serde factory build kvcodec's pair for ``remote_serde: <name>``.

    Call it in the process that runs LMCache (the vLLM worker) before LMCache creates its
    storage backends. Other names still reach LMCache's own factory. Modules that imported the
    factory by name before (``from ...naive_serde import CreateSerde``, as remote_backend.py
    does) are pointed at the new one too. Calling it again is harmless.
    """
    package = importlib.import_module("lmcache.v1.storage_backend.naive_serde")
    current = package.CreateSerde
    names = getattr(current, "_kvcodec_names", frozenset())
    if name in names:
        return
    upstream = getattr(current, "_kvcodec_original", current)
    names = names | {name}

    def CreateSerde(serde_type, metadata, config, *args, **kwargs):  # noqa: N802 (LMCache's name)
        if serde_type in names:
            return create_serde(metadata, config)
        return upstream(serde_type, metadata, config, *args, **kwargs)

    CreateSerde._kvcodec_original = upstream
    CreateSerde._kvcodec_names = names
    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "") or "").startswith("lmcache.") and \
                getattr(module, "CreateSerde", None) in (current, upstream):
            module.CreateSerde = CreateSerde
    package.CreateSerde = CreateSerde


def vllm_general_plugin() -> None:
    """``register()`` when LMCache is installed, else nothing: for vLLM's "vllm.general_plugins"
    entry point, which vLLM runs in each of its processes (the workers, where LMCache builds its
    backends, included), also where LMCache is absent."""
    try:
        importlib.import_module("lmcache.v1.storage_backend.naive_serde")
    except ImportError:
        return
    register()


def _memory_management():
    try:
        return importlib.import_module("lmcache.v1.memory_management")
    except ImportError as e:
        raise ImportError("serialize/deserialize make LMCache memory objects and need LMCache (lmcache.v1); "
                          "without it use to_bytes/from_bytes") from e


def _heads_and_size(num_heads, head_size, metadata):
    """(num_heads, head_size) from the arguments or metadata.kv_shape, which must agree."""
    from_meta = None
    kv_shape = getattr(metadata, "kv_shape", None)
    if kv_shape is not None:
        if len(kv_shape) != 5:
            raise ValueError(f"metadata.kv_shape is (num_layers, 2, chunk_size, num_heads, head_size), not {kv_shape}")
        from_meta = (int(kv_shape[3]), int(kv_shape[4]))
    if num_heads is None and head_size is None:
        return from_meta if from_meta is not None else (None, None)
    if num_heads is None or head_size is None:
        raise ValueError("give both num_heads and head_size")
    given = (int(num_heads), int(head_size))
    if given[0] < 1 or given[1] < 1:
        raise ValueError(f"num_heads and head_size must be positive, not {given}")
    if from_meta is not None and from_meta != given:
        raise ValueError(f"num_heads/head_size {given} differ from metadata.kv_shape's {from_meta}")
    return given


def _bytes_of(data):
    """A memory object's byte_array (bytes, bytearray, memoryview or a uint8 tensor) as a buffer."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return data
    if hasattr(data, "numpy"):
        return data.detach().cpu().contiguous().numpy().tobytes()
    raise ValueError(f"a memory object's byte_array is bytes-like, not {type(data).__name__}")


def _swap_tokens_heads(x):
    """[layers, a, b, head_size] -> [layers, b, a, head_size], contiguous."""
    if hasattr(x, "permute"):
        return x.permute(0, 2, 1, 3).contiguous()
    import numpy as np

    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))
