"""numpy and torch tensors to the buffers the native part takes, and back."""

from __future__ import annotations

import sys

import numpy as np

_NUMPY_DTYPES = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32"}


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_of(x):
    """torch, when x is a torch tensor (torch is then imported already; numpy users never load it)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(x, torch.Tensor) else None


def from_tensor(x, name: str):
    """(a C-contiguous buffer, kvcodec dtype name) for a numpy array or a CPU/GPU torch tensor.
    Copies only where the input is not contiguous (or lives on a GPU). The dtype and shape are
    checked first: a broadcast view (np.broadcast_to, Tensor.expand) can claim a shape whose copy
    would not fit in memory, and must get the library's error, not numpy's MemoryError."""
    torch = torch_of(x)
    if torch is not None:
        t = x.detach()
        dtype = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}.get(t.dtype)
        if dtype is None:
            raise _error(f"{name} is {t.dtype}; kvcodec takes float16, bfloat16 or float32")
        _check_shape(name, t.shape, dtype)
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        return (t.view(torch.int16) if dtype == "bf16" else t).numpy(), dtype
    if isinstance(x, np.ndarray):
        dtype = _NUMPY_DTYPES.get(x.dtype)
        if dtype is None:
            raise _error(f"{name} is {x.dtype}; kvcodec takes float16 or float32 (bfloat16 through torch)")
        _check_shape(name, x.shape, dtype)
        return np.ascontiguousarray(x), dtype
    raise _error(f"{name} must be a numpy array or a torch tensor, not {type(x).__name__}")


def _check_shape(name: str, shape, dtype: str) -> None:
    from . import _kvcodec

    _kvcodec.check_shape(name, [int(d) for d in shape], dtype)


def to_output(arr: np.ndarray, dtype: str, framework: str | None):
    """A decoded array (sharing the decoded buffer) as numpy or torch in the encoded dtype."""
    if framework not in (None, "numpy", "torch"):
        raise _error(f"framework must be 'numpy' or 'torch', not {framework!r}")
    if framework is None:
        framework = "torch" if dtype == "bf16" else "numpy"
    if framework == "numpy":
        if dtype == "bf16":
            raise _error("numpy has no bfloat16: decode(..., framework='torch') for this file")
        return arr
    torch = _torch()
    if torch is None:
        raise _error("framework='torch' needs torch (apt-get install python3-torch)")
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if dtype == "bf16" else t


def _error(message: str):
    from . import _kvcodec

    return _kvcodec.InvalidArgumentError(message)
