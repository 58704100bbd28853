"""vLLM's paged KV cache to kvcodec's layout and back.

vLLM keeps one tensor per attention layer, in blocks of ``block_size`` tokens; a sequence's
blocks are listed in its block table. The layouts (``layout=``):

- "NHD" (vLLM's FlashAttention, Triton and FlashInfer backends): [num_blocks, 2, block_size, kv_heads, head_dim]
- "HND" (FlashInfer's HND): [num_blocks, 2, kv_heads, block_size, head_dim]
- "kv_first" (older vLLM FlashAttention): [2, num_blocks, block_size, kv_heads, head_dim]

``gather`` reads one sequence's first ``num_tokens`` tokens out of the layers' caches as K and
V shaped [layers, tokens, kv_heads, head_dim] (what ``kvcodec.encode`` takes); ``scatter`` writes
K and V (what ``kvcodec.decode`` gives) into the caches at a block table, touching no other slot.
Both work on numpy arrays and on torch tensors (on any device).
"""

from __future__ import annotations

from ._arrays import torch_of

LAYOUTS = ("NHD", "HND", "kv_first")


def gather(kv_caches, block_table, num_tokens: int, *, layout: str = "NHD"):
    """(k, v), each [layers, num_tokens, kv_heads, head_dim], of one sequence."""
    caches = list(kv_caches)
    if not caches:
        raise ValueError("no layers")
    block, offset = _slots(caches[0], block_table, num_tokens, layout)
    ks, vs = [], []
    for cache in caches:
        _check_layer(cache, caches[0], layout)
        ks.append(_read(cache, 0, block, offset, layout))
        vs.append(_read(cache, 1, block, offset, layout))
    stack = _stack_fn(caches[0])
    return stack(ks), stack(vs)


def scatter(k, v, kv_caches, block_table, *, layout: str = "NHD") -> None:
    """Writes k and v ([layers, tokens, kv_heads, head_dim]) into the caches in place."""
    caches = list(kv_caches)
    if len(caches) != k.shape[0] or tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must match {len(caches)} layers and each other")
    block, offset = _slots(caches[0], block_table, k.shape[1], layout)
    for layer, cache in enumerate(caches):
        _check_layer(cache, caches[0], layout)
        _write(cache, 0, block, offset, layout, _like(k[layer], cache))
        _write(cache, 1, block, offset, layout, _like(v[layer], cache))


def _dims(cache, layout):
    """(num_blocks, block_size, kv_heads, head_dim) of one layer's cache."""
    shape = tuple(cache.shape)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    if len(shape) != 5:
        raise ValueError(f"a layer's cache has 5 dimensions, not {len(shape)}")
    if layout == "NHD" and shape[1] == 2:
        return shape[0], shape[2], shape[3], shape[4]
    if layout == "HND" and shape[1] == 2:
        return shape[0], shape[3], shape[2], shape[4]
    if layout == "kv_first" and shape[0] == 2:
        return shape[1], shape[2], shape[3], shape[4]
    raise ValueError(f"shape {shape} is not the {layout} layout")


def _check_layer(cache, first, layout):
    if tuple(cache.shape) != tuple(first.shape):
        raise ValueError(f"layers differ in shape: {tuple(cache.shape)} and {tuple(first.shape)} ({layout})")


def _slots(cache, block_table, num_tokens, layout):
    """Per token, its block id and its offset in the block, as index arrays of the cache's kind."""
    num_blocks, block_size, _, _ = _dims(cache, layout)
    table = [int(b) for b in block_table]
    num_tokens = int(num_tokens)
    if num_tokens < 0 or num_tokens > len(table) * block_size:
        raise ValueError(f"{num_tokens} tokens do not fit {len(table)} blocks of {block_size}")
    if any(b < 0 or b >= num_blocks for b in table):
        raise ValueError(f"a block id is outside 0..{num_blocks - 1}")
    block = [table[t // block_size] for t in range(num_tokens)]
    offset = [t % block_size for t in range(num_tokens)]
    torch = torch_of(cache)
    if torch is not None:
        return (torch.tensor(block, dtype=torch.long, device=cache.device),
                torch.tensor(offset, dtype=torch.long, device=cache.device))
    import numpy as np

    return np.asarray(block, dtype=np.int64), np.asarray(offset, dtype=np.int64)


# Advanced indices split by a slice put the token dimension first in numpy and torch alike, so
# every layout reads and writes [tokens, kv_heads, head_dim].
def _read(cache, kind, block, offset, layout):
    if layout == "NHD":
        return cache[block, kind, offset]
    if layout == "HND":
        return cache[block, kind, :, offset]
    return cache[kind, block, offset]


def _write(cache, kind, block, offset, layout, values):
    if layout == "NHD":
        cache[block, kind, offset] = values
    elif layout == "HND":
        cache[block, kind, :, offset] = values
    else:
        cache[kind, block, offset] = values


def _stack_fn(x):
    torch = torch_of(x)
    if torch is not None:
        return torch.stack
    import numpy as np

    return np.stack


def _like(values, cache):
    """values converted to the cache's kind, device and dtype."""
    torch = torch_of(cache)
    if torch is not None:
        if not isinstance(values, torch.Tensor):
            values = torch.from_numpy(values)
        return values.to(device=cache.device, dtype=cache.dtype)
    import numpy as np

    return np.asarray(values, dtype=cache.dtype)
