"""A serializer pair in LMCache's serde shape, so a kvcodec codec can stand in as a custom serde.

LMCache hands a serde one KV tensor per chunk, [num_layers, 2, num_tokens, num_heads, head_size]
(its "vllm" format; "huggingface" has heads and tokens swapped) and stores the bytes it returns.
``KvcodecSerializer.to_bytes`` encodes that tensor into one .kvc file; ``KvcodecDeserializer``
reads it back into the same shape, dtype and format. LMCache itself is not needed to use them.
"""

from __future__ import annotations

import kvcodec

FORMATS = ("vllm", "huggingface")


class KvcodecSerializer:
    """to_bytes(tensor) -> bytes with the given codec and level (kvtc needs its calibration)."""

    def __init__(self, codec: str = "kvtc", level: str | None = None, *, calibration=None, model=None,
                 fmt: str = "vllm"):
        if fmt not in FORMATS:
            raise ValueError(f"fmt must be one of {FORMATS}, not {fmt!r}")
        self.codec, self.level, self.calibration, self.model, self.fmt = codec, level, calibration, model, fmt

    def to_bytes(self, t) -> bytes:
        if len(t.shape) != 5 or t.shape[1] != 2:
            raise ValueError(f"expected [num_layers, 2, tokens, heads, head_size], not {tuple(t.shape)}")
        k, v = t[:, 0], t[:, 1]
        if self.fmt == "huggingface":
            k, v = _swap_tokens_heads(k), _swap_tokens_heads(v)
        return kvcodec.encode(k, v, self.codec, self.level, calibration=self.calibration, model=self.model)


class KvcodecDeserializer:
    """from_bytes(bytes) -> the tensor KvcodecSerializer was given (torch, on ``device``)."""

    def __init__(self, *, fmt: str = "vllm", device=None, framework: str = "torch"):
        if fmt not in FORMATS:
            raise ValueError(f"fmt must be one of {FORMATS}, not {fmt!r}")
        self.fmt, self.device, self.framework = fmt, device, framework

    def from_bytes(self, data: bytes):
        k, v = kvcodec.decode(data, framework=self.framework)
        if self.fmt == "huggingface":
            k, v = _swap_tokens_heads(k), _swap_tokens_heads(v)
        if self.framework == "torch":
            import torch

            t = torch.stack([k, v], dim=1)
            return t.to(self.device) if self.device is not None else t
        import numpy as np

        return np.stack([k, v], axis=1)


def _swap_tokens_heads(x):
    """[layers, a, b, head_size] -> [layers, b, a, head_size], contiguous."""
    if hasattr(x, "permute"):
        return x.permute(0, 2, 1, 3).contiguous()
    import numpy as np

    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))
