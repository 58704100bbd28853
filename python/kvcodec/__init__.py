"""kvcodec for Python: compress KV caches with kvcodec's codecs, and keep them in its stores.

K and V are arrays shaped [layers, tokens, kv_heads, head_dim]: numpy arrays or torch tensors
(float16, bfloat16 or float32), or any C-contiguous 4-D buffer of float16 or float32 (a
memoryview: numpy and torch are optional). ``encode`` returns the bytes of one .kvc file, the
same bytes the C++ library and the ``kvcodec`` command write and read; ``decode`` gives K and V
back in the dtype they were encoded from (numpy arrays, or memoryviews where numpy is not
installed). Errors are ``kvcodec.Error`` subclasses with the library's message.
"""

from __future__ import annotations

import json
import operator
import os
import re
import sys
from dataclasses import dataclass

from . import _kvcodec

try:
    import numpy as _np
except ImportError:  # numpy is optional: the package then takes and gives buffers (memoryviews)
    _np = None
else:
    from . import _arrays

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
    "NotFoundError", "Rope", "Store", "StoreIOError", "UnsupportedError", "calibrate", "chunk_keys",
    "chunk_object_name", "codecs", "decode", "encode", "inspect", "store_chunks",
]


@dataclass(frozen=True)
class Rope:
    """The rotary position embedding a model applies to its keys before they are cached.

    style: "neox" rotates channel i with i + n_rot/2 (Hugging Face's ``rotate_half``: Llama,
    Qwen, Mistral in transformers and vLLM); "normal" rotates adjacent pairs (2i, 2i+1: GPT-J,
    and llama.cpp's LLaMA, whose converter permutes the weights for it); the sectioned "mrope" and
    "imrope" are undone as "neox" (on text, which is all kvcodec caches, they are NeoX's rotation);
    "none" (ALiBi or learned positions) and "vision" are not undone: keys are fitted as stored and
    the style recorded (``kvcodec tokenize --json`` names a GGUF model's
    style). base: theta
    (``rope_theta``). n_rot: rotated channels per head (0: all; partial rotary as in GPT-NeoX).
    freq_scale: positions are multiplied by it (linear scaling; a ``factor`` f in Hugging Face's
    ``rope_scaling`` is 1/f).
    """

    base: float = 10000.0
    style: str = "neox"
    n_rot: int = 0
    freq_scale: float = 1.0


class Calibration:
    """A kvtc calibration (.kvcal), loaded into this process or fitted in it by ``calibrate``: kvtc
    encodes with it, and a .kvc file made with it decodes once it is loaded (files name their
    calibration by hash)."""

    def __init__(self, info: dict, report: dict | None = None):
        self._info = dict(info)
        self._report = report

    @classmethod
    def load(cls, path) -> "Calibration":
        return cls(_kvcodec.load_calibration(_path(path)))

    def save(self, path) -> None:
        """Writes the .kvcal file (the format `kvcodec calibrate` writes and every kvcodec reads)."""
        _kvcodec.save_calibration(self.hash, _path(path))
        if not self._info["path"]:
            self._info["path"] = os.fsdecode(_path(path))

    @property
    def path(self) -> str | None:
        """The file it was loaded from or last saved to (None: fitted here and not saved)."""
        return self._info["path"] or None

    @property
    def report(self) -> dict | None:
        """For a fitted calibration, the fit's report (as `kvcodec calibrate --json`): the quantiser,
        grouping and group size chosen and why, the candidates' errors, and per target ratio the
        coded size and relative error measured on the held-back samples."""
        return self._report

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

    @property
    def keys_rope_undone(self) -> bool:
        return self._info["keys_rope_undone"]

    def __repr__(self) -> str:
        return f"Calibration({self.path!r}, model={self.model}, hash={self.hash})"


def calibrate(samples, *, model=None, rope: Rope | None, grouping: str | None = None, quantizer: str | None = None,
              group_size: int = 0, chunk_tokens: int = 256, ratios=None, heldout_fraction: float = 0.2,
              sinks: int = 4, threads: int = 0, progress: bool = False) -> Calibration:
    """Fits a kvtc calibration on KV a model produced, with the rules of `kvcodec calibrate`.

    samples: a sequence of (k, v) or (k, v, pos_begin), each k and v shaped [layers, tokens,
    kv_heads, head_dim] (numpy, torch or a 4-D buffer, any of the package's dtypes), as the model
    cached them for a text starting at sequence position pos_begin (default 0). Use whole, varied
    texts: the last ``heldout_fraction`` of the samples (at least one) are held back to measure the
    choice and the sizes on, the rest fit the bases. Positions below ``sinks`` are left out.
    model: the model's fingerprint, which the calibration and the files made with it are bound to:
    16 bytes, or the 32 hex digits ``kvcodec tokenize --json`` prints as "fingerprint" (None: all
    zeros, no model named). rope: the model's RoPE (``Rope``), so keys are fitted at position 0, as
    kvtc codes them; pass None only for a model whose keys carry no RoPE (kvtc then codes keys as
    stored).
    grouping ("layer", "layer-head", "all"), quantizer ("token-group", "component") and group_size
    (token-group; 0: the best of 8, 16, 32) default to the best measured; ratios: the target ratios
    of the ladder (default 4 to 64). The result is loaded in this process; ``save`` writes it.
    """
    samples = list(samples)
    if len(samples) < 2:
        raise InvalidArgumentError(f"calibration needs at least two samples (one held back), not {len(samples)}")
    if not 0 < heldout_fraction < 1:
        raise InvalidArgumentError("heldout_fraction must be in (0, 1)")
    if rope is not None and not isinstance(rope, Rope):
        raise InvalidArgumentError("rope must be a kvcodec.Rope or None")
    n_heldout = max(1, int(len(samples) * heldout_fraction + 0.5))
    n_fit = len(samples) - n_heldout
    if n_fit < 1:
        raise InvalidArgumentError(f"{len(samples)} samples leave none to fit on at heldout_fraction {heldout_fraction}")
    windows = []
    for i, sample in enumerate(samples):
        if not isinstance(sample, (tuple, list)) or len(sample) not in (2, 3):
            raise InvalidArgumentError(f"sample {i} is not (k, v) or (k, v, pos_begin)")
        kb, dtype = _kv_buffer(sample[0], "k")
        vb, v_dtype = _kv_buffer(sample[1], "v")
        if dtype != v_dtype:
            raise InvalidArgumentError(f"sample {i}: k is {dtype} but v is {v_dtype}")
        pos = _int_in(sample[2], f"sample {i}'s pos_begin", 0, _I32) if len(sample) == 3 else 0
        windows.append((kb, vb, dtype, pos, i >= n_fit))
    rope_tuple = None if rope is None else (_text(str(rope.style), "rope style"),
                                            _int_in(rope.n_rot, "rope n_rot", 0, _U32), float(rope.base),
                                            float(rope.freq_scale))
    info, report = _kvcodec.calibrate(windows, _fingerprint(model), rope_tuple, _text(grouping or "", "grouping"),
                                      _text(quantizer or "", "quantizer"),
                                      _int_in(group_size, "group_size", 0, _U32),
                                      _int_in(chunk_tokens, "chunk_tokens", 0, _U32),
                                      [float(r) for r in (ratios or [])], _int_in(sinks, "sinks", 0, _U32),
                                      _int_in(threads, "threads", 0, 4096), bool(progress))
    return Calibration(info, json.loads(report))


def encode(k, v, codec: str = "kvtc", level: str | None = None, *, calibration: Calibration | None = None,
           model=None, pos_begin: int = 0, params: dict | None = None) -> bytes:
    """One .kvc file holding K and V ([layers, tokens, kv_heads, head_dim], same shape and dtype).

    codec: "raw", "planes", "quant", "rotquant", "kvtc", "cachegen" or "video" (see codecs());
    level: the codec's level name (None: its default). kvtc needs a calibration, and encodes for
    its model; other codecs take ``model`` (the model's fingerprint: 16 bytes, or 32 hex digits as
    ``kvcodec tokenize --json`` prints it) to bind the file to a model. pos_begin: the sequence
    position of token 0 (kvtc undoes RoPE from it).
    """
    kb, dtype = _kv_buffer(k, "k")
    vb, v_dtype = _kv_buffer(v, "v")
    if dtype != v_dtype:
        raise InvalidArgumentError(f"k is {dtype} but v is {v_dtype}")
    if calibration is None and codec == "kvtc":
        raise InvalidArgumentError("kvtc needs a calibration (kvcodec.Calibration.load(path))")
    model = _fingerprint(_model_of(model, calibration))
    return _kvcodec.encode(kb, vb, dtype, _text(codec, "codec"), _text("" if level is None else str(level), "level"),
                           {_text(str(a), "a param's name"): _text(str(b), "a param's value")
                            for a, b in (params or {}).items()}, model,
                           _int_in(pos_begin, "pos_begin", 0, _I32))


def decode(data, *, model=None, framework: str | None = None):
    """(k, v) of a .kvc file, in the dtype it was encoded from.

    framework: "numpy", "torch" or "memoryview" (None: numpy, or torch for bfloat16, which numpy
    lacks; memoryview where numpy is not installed). A memoryview is 4-D, format "e" (float16),
    "f" (float32) or "h" (bfloat16's bits as int16); it shares the decoded memory, as the arrays do.
    model: when given (as ``encode`` takes it), a file made for another model is an error. A
    damaged or hostile file raises CorruptError (or another kvcodec.Error); it never crashes the
    process.
    """
    if framework not in (None, "numpy", "torch", "memoryview"):
        raise InvalidArgumentError(f"framework must be 'numpy', 'torch' or 'memoryview', not {framework!r}")
    if framework in ("numpy", "torch") and _np is None:
        raise InvalidArgumentError(f"framework={framework!r} needs numpy, which is not installed "
                                   "(pip install numpy, or decode(..., framework='memoryview'))")
    k, v, dtype, _ = _kvcodec.decode(_as_bytes(data), _fingerprint(model))
    if framework == "memoryview" or _np is None:
        return k, v
    return _arrays.to_output(_np.asarray(k), dtype, framework), _arrays.to_output(_np.asarray(v), dtype, framework)


def inspect(data) -> dict:
    """The header of a .kvc file (codec, level, shape, dtype, model, positions, sizes) as a dict."""
    return json.loads(_kvcodec.inspect_json(_as_bytes(data)))


def codecs() -> list:
    """Every codec: name, levels (best quality first), default level, parameters, description,
    whether it needs a calibration, whether it is lossless (as `kvcodec codecs --json`)."""
    return json.loads(_kvcodec.codecs_json())


class Store:
    """A chunk store by URL: mem://, dir:///path, redis://host:port, redis-cluster://h:p,h:p
    (None: the embedded default, as the C++ side). Objects are sealed to their names; with
    ``secret``, by HMAC-SHA256 (only objects sealed with the same secret are read)."""

    def __init__(self, url: str | None = None, *, secret: str = "", capacity_bytes: int = 0, timeout_ms: int = 2000):
        self._store = _kvcodec.Store(_text(url or "", "url"), _text(secret, "secret"),
                                     _int_in(capacity_bytes, "capacity_bytes", 0, (1 << 64) - 1),
                                     _int_in(timeout_ms, "timeout_ms", 0, _U32))

    @property
    def url(self) -> str:
        return self._store.url

    def put(self, name: str, data) -> None:
        self._store.put(_text(name, "object name"), _as_bytes(data))

    def get(self, name: str) -> bytes:
        """The object's bytes; NotFoundError when there is none, CorruptError when it fails its
        seal or is larger than 1 GiB (refused before it is read)."""
        return self._store.get(_text(name, "object name"))

    def exists(self, name: str) -> bool:
        return self._store.exists(_text(name, "object name"))

    def delete(self, name: str) -> None:
        self._store.delete(_text(name, "object name"))

    def __repr__(self) -> str:
        return f"Store({self.url!r})"


def chunk_keys(model, tokens, chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> list:
    """The 16-byte keys of the whole chunks of ``tokens``: chunk i's key hashes the model and every
    token up to its end, exactly as the C++ side (and so ``kvcodec run`` / ``serve``) computes it.
    model: the model's fingerprint (16 bytes, or the 32 hex digits ``kvcodec tokenize --json``
    prints; None: all zeros)."""
    return _kvcodec.chunk_keys(_fingerprint(model), _token_ids(tokens), _int_in(chunk_tokens, "chunk_tokens", 1, _U32))


def store_chunks(store: Store, k, v, tokens, *, model=None, calibration: Calibration | None = None, rungs=None,
                 chunk_tokens: int = DEFAULT_CHUNK_TOKENS, first_chunk: int = 0) -> dict:
    """Stores a sequence's whole chunks as ``kvcodec run`` and ``serve`` store theirs, so they find
    and reuse them: each chunk at every (codec, level) of ``rungs``, then its manifest.

    k, v: the sequence's KV from position 0 ([layers, tokens, kv_heads, head_dim]), holding at
    least every whole chunk of ``tokens`` (the token ids it was computed from, BOS included as the
    engine prefilled them; ``kvcodec tokenize`` gives llama.cpp's). Chunks before ``first_chunk``
    are not written (already stored). rungs: (codec, level) pairs; default raw fp16 and quant 8
    (``run`` fetches quant 8 only where the model's quality profile allows it; without a profile
    it stores and fetches raw fp16 alone). kvtc needs a calibration (its model
    names the chunks). Returns {"chunks": written, "bytes": their encoded bytes}.
    """
    kb, dtype = _kv_buffer(k, "k")
    vb, v_dtype = _kv_buffer(v, "v")
    if dtype != v_dtype:
        raise InvalidArgumentError(f"k is {dtype} but v is {v_dtype}")
    rungs = [("raw", "fp16"), ("quant", "8")] if rungs is None else [
        (_text(str(c), "a rung's codec"), _text(str(l), "a rung's level")) for c, l in rungs]
    model = _model_of(model, calibration)
    if any(codec == "kvtc" for codec, _ in rungs) and calibration is None:
        raise InvalidArgumentError("a kvtc rung needs a calibration (kvcodec.Calibration.load(path))")
    return store._store.store_chunks(kb, vb, dtype, _token_ids(tokens), _fingerprint(model),
                                     _int_in(chunk_tokens, "chunk_tokens", 1, _U32), rungs,
                                     _int_in(first_chunk, "first_chunk", 0, _U32))


def chunk_object_name(key: bytes, codec: str, level: str) -> str:
    """The store object name of one encoded variant of a chunk: "<32 hex>.<codec>.<level>"."""
    return _kvcodec.chunk_object_name(bytes(key), _text(codec, "codec"), _text(str(level), "level"))


_I32 = (1 << 31) - 1
_U32 = (1 << 32) - 1


def _int_in(value, name: str, lo: int, hi: int) -> int:
    """value as an int in [lo, hi], or InvalidArgumentError (never a TypeError from the binding)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{name} must be an integer, not {type(value).__name__}") from None
    if not lo <= v <= hi:
        raise InvalidArgumentError(f"{name} must be in {lo}..{hi}, not {v}")
    return v


def _text(value, name: str) -> str:
    """value as a str the native part takes (it passes strings on as UTF-8), or
    InvalidArgumentError: a str holding a lone surrogate ("\\ud800", or what os.fsdecode makes of
    a byte that is not UTF-8) has no UTF-8 form, and the binding would raise TypeError."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"{name} is not valid text: a lone surrogate at index {e.start}") from None
    return value


def _path(path) -> bytes:
    """A file path as the bytes the file system names it by (os.fsencode), or InvalidArgumentError."""
    try:
        return os.fsencode(path)
    except TypeError:
        raise InvalidArgumentError(f"a path must be str, bytes or os.PathLike, not {type(path).__name__}") from None
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"path is not valid text: a lone surrogate at index {e.start}") from None


def _token_ids(tokens) -> list:
    """Token ids as 32-bit ints (numpy and torch integers too), or InvalidArgumentError."""
    try:
        ids = [operator.index(t) for t in tokens]
    except TypeError:
        raise InvalidArgumentError("tokens must be integers") from None
    if any(not -(1 << 31) <= t < (1 << 31) for t in ids):
        raise InvalidArgumentError("a token id is outside the 32-bit range")
    return ids


def _as_bytes(data):
    if isinstance(data, (bytes, bytearray, memoryview)):
        return data
    raise InvalidArgumentError(f"expected bytes, not {type(data).__name__}")


def _model_of(model, calibration):
    """The model a call names: the calibration's, which ``model`` (if given) must match."""
    if calibration is None:
        return model
    if model is not None and _fingerprint(model).hex() != calibration.model:
        raise InvalidArgumentError("model differs from the calibration's model")
    return calibration.model


_HEX_FINGERPRINT = re.compile(r"[0-9a-fA-F]{32}")


def _fingerprint(model):
    """A model as the native part takes it: None (no model: all zeros) or its 16-byte fingerprint,
    given as bytes (bytearray, memoryview) or as the 32 hex digits kvcodec prints it as (`kvcodec
    tokenize --json`'s "fingerprint", `kvcodec inspect`'s model, ``Calibration.model``)."""
    if model is None:
        return None
    if isinstance(model, (bytes, bytearray, memoryview)):
        fingerprint = bytes(model)
        if len(fingerprint) == 16:
            return fingerprint
        what = f"{len(fingerprint)} bytes"
    elif isinstance(model, str):
        if _HEX_FINGERPRINT.fullmatch(model):
            return bytes.fromhex(model)
        what = f"the str {model[:40]!r}" + ("..." if len(model) > 40 else "")
    else:
        what = type(model).__name__
    raise InvalidArgumentError(
        "model must be the model's 16-byte fingerprint, as bytes or as the 32 hex digits `kvcodec tokenize "
        f"--json` prints as \"fingerprint\" (None: no model), not {what}")


# The buffer formats (struct syntax) K and V may come in without numpy, and their kvcodec dtypes.
_BUFFER_DTYPES = {"e": "f16", "f": "f32"}


def _kv_buffer(x, name: str):
    """(a C-contiguous buffer, kvcodec dtype name) of K or V: numpy arrays and torch tensors as
    _arrays takes them (where numpy is installed), anything else that exports a 4-D float16 or
    float32 buffer (a memoryview, what decode returns without numpy) as it is, uncopied."""
    if _np is not None and (isinstance(x, _np.ndarray) or _arrays.torch_of(x) is not None):
        return _arrays.from_tensor(x, name)
    try:
        view = memoryview(x)
    except TypeError:
        torch = sys.modules.get("torch")
        hint = " (torch tensors need numpy)" if torch is not None and isinstance(x, torch.Tensor) else ""
        raise InvalidArgumentError(f"{name} must be a numpy array, a torch tensor or a 4-D float16/float32 "
                                   f"buffer such as a memoryview, not {type(x).__name__}{hint}") from None
    fmt = view.format
    if fmt[:1] in ("@", "=") or (fmt[:1] == "<" and sys.byteorder == "little"):
        fmt = fmt[1:]
    dtype = _BUFFER_DTYPES.get(fmt)
    if dtype is None:
        raise InvalidArgumentError(f"{name} is a buffer of format {view.format!r}; kvcodec takes float16 ('e') "
                                   "or float32 ('f') buffers (bfloat16 through torch)")
    _kvcodec.check_shape(name, list(view.shape), dtype)
    if not view.c_contiguous:
        raise InvalidArgumentError(f"{name} is not C-contiguous")
    return view, dtype
