"""kvcodec for Python: compress KV caches with kvcodec's codecs, and keep them in its stores.

K and V are arrays shaped [layers, tokens, kv_heads, head_dim] (numpy or torch; float16,
bfloat16 or float32). ``encode`` returns the bytes of one .kvc file, the same bytes the C++
library and the ``kvcodec`` command write and read; ``decode`` gives K and V back in the dtype
they were encoded from. Errors are ``kvcodec.Error`` subclasses with the library's message.
"""

from __future__ import annotations

import json

from . import _kvcodec
from ._arrays import from_tensor, to_output

Error = _kvcodec.Error
InvalidArgumentError = _kvcodec.InvalidArgumentError
CorruptError = _kvcodec.CorruptError
UnsupportedError = _kvcodec.UnsupportedError
NotFoundError = _kvcodec.NotFoundError
StoreIOError = _kvcodec.StoreIOError
InternalError = _kvcodec.InternalError

DEFAULT_CHUNK_TOKENS = _kvcodec.default_chunk_tokens

__all__ = [
    "Calibration", "CorruptError", "DEFAULT_CHUNK_TOKENS", "Error", "InternalError", "InvalidArgumentError",
    "NotFoundError", "Store", "StoreIOError", "UnsupportedError", "chunk_keys", "chunk_object_name", "codecs",
    "decode", "encode", "inspect",
]


class Calibration:
    """A kvtc calibration (.kvcal), loaded into this process: kvtc encodes with it, and a .kvc file
    made with it decodes once it is loaded (files name their calibration by hash)."""

    def __init__(self, info: dict):
        self._info = dict(info)

    @classmethod
    def load(cls, path) -> "Calibration":
        return cls(_kvcodec.load_calibration(str(path)))

    @property
    def path(self) -> str:
        return self._info["path"]

    @property
    def model(self) -> str:
        """The fingerprint (32 hex digits) of the model it was fitted for."""
        return self._info["model_fingerprint"]

    @property
    def hash(self) -> str:
        return self._info["hash"]

    @property
    def target_ratios(self) -> list:
        return list(self._info["target_ratios"])

    def __repr__(self) -> str:
        return f"Calibration({self.path!r}, model={self.model})"


def encode(k, v, codec: str = "kvtc", level: str | None = None, *, calibration: Calibration | None = None,
           model=None, pos_begin: int = 0, params: dict | None = None) -> bytes:
    """One .kvc file holding K and V ([layers, tokens, kv_heads, head_dim], same shape and dtype).

    codec: "raw", "quant", "kvtc", "cachegen" or "video" (see codecs()); level: the codec's level
    name (None: its default). kvtc needs a calibration, and encodes for its model; other codecs
    take ``model`` (16 bytes or 32 hex digits, as the C++ side's fingerprint) to bind the file to a
    model. pos_begin: the sequence position of token 0 (kvtc undoes RoPE from it).
    """
    kb, dtype = from_tensor(k, "k")
    vb, v_dtype = from_tensor(v, "v")
    if dtype != v_dtype:
        raise InvalidArgumentError(f"k is {dtype} but v is {v_dtype}")
    if calibration is not None:
        if model is not None and _fingerprint_hex(model) != calibration.model:
            raise InvalidArgumentError("model differs from the calibration's model")
        model = calibration.model
    elif codec == "kvtc":
        raise InvalidArgumentError("kvtc needs a calibration (kvcodec.Calibration.load(path))")
    return _kvcodec.encode(kb, vb, dtype, codec, "" if level is None else str(level),
                           {str(a): str(b) for a, b in (params or {}).items()}, model, int(pos_begin))


def decode(data, *, model=None, framework: str | None = None):
    """(k, v) of a .kvc file, in the dtype it was encoded from.

    framework: "numpy" or "torch" (None: numpy, or torch for bfloat16, which numpy lacks).
    model: when given, a file made for another model is an error. A damaged or hostile file
    raises CorruptError (or another kvcodec.Error); it never crashes the process.
    """
    k, v, dtype, _ = _kvcodec.decode(_as_bytes(data), model)
    return to_output(k, dtype, framework), to_output(v, dtype, framework)


def inspect(data) -> dict:
    """The header of a .kvc file (codec, level, shape, dtype, model, positions, sizes) as a dict."""
    return json.loads(_kvcodec.inspect_json(_as_bytes(data)))


def codecs() -> list:
    """Every codec: name, levels (best quality first), default level, parameters, description,
    whether it needs a calibration (as `kvcodec codecs --json`)."""
    return json.loads(_kvcodec.codecs_json())


class Store:
    """A chunk store by URL: mem://, dir:///path, redis://host:port, redis-cluster://h:p,h:p
    (None: the embedded default, as the C++ side). Objects are sealed to their names; with
    ``secret``, by HMAC-SHA256 (only objects sealed with the same secret are read)."""

    def __init__(self, url: str | None = None, *, secret: str = "", capacity_bytes: int = 0, timeout_ms: int = 2000):
        self._store = _kvcodec.Store(url or "", secret, int(capacity_bytes), int(timeout_ms))

    @property
    def url(self) -> str:
        return self._store.url

    def put(self, name: str, data) -> None:
        self._store.put(name, _as_bytes(data))

    def get(self, name: str) -> bytes:
        """The object's bytes; NotFoundError when there is none."""
        return self._store.get(name)

    def exists(self, name: str) -> bool:
        return self._store.exists(name)

    def delete(self, name: str) -> None:
        self._store.delete(name)

    def __repr__(self) -> str:
        return f"Store({self.url!r})"


def chunk_keys(model, tokens, chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> list:
    """The 16-byte keys of the whole chunks of ``tokens``: chunk i's key hashes the model and every
    token up to its end, exactly as the C++ side (and so ``kvcodec run`` / ``serve``) computes it."""
    return _kvcodec.chunk_keys(model, [int(t) for t in tokens], int(chunk_tokens))


def chunk_object_name(key: bytes, codec: str, level: str) -> str:
    """The store object name of one encoded variant of a chunk: "<32 hex>.<codec>.<level>"."""
    return _kvcodec.chunk_object_name(bytes(key), codec, str(level))


def _as_bytes(data):
    if isinstance(data, (bytes, bytearray, memoryview)):
        return data
    raise InvalidArgumentError(f"expected bytes, not {type(data).__name__}")


def _fingerprint_hex(model) -> str:
    if isinstance(model, (bytes, bytearray)) and len(model) == 16:
        return bytes(model).hex()
    if isinstance(model, str) and len(model) == 32:
        return model.lower()
    raise InvalidArgumentError("a model fingerprint is 16 bytes or 32 hex digits")
