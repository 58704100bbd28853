"""vLLM's paged KV cache to kvcodec's layout and back.

vLLM keeps one tensor per attention layer, in blocks of ``block_size`` tokens; a sequence's
blocks are listed in its block table. Each attention backend declares a *logical* shape
(``get_kv_cache_shape``) and a *stride order* (``get_kv_cache_stride_order``): the GPU model
runner allocates the memory in the stride order and hands the layers a permuted view that keeps
the logical shape. So the logical shape says which axis is what, and only the strides say how
the memory is laid out. This module reads both and accepts exactly what the current backends
declare (vllm/v1/attention/backends/):

- "flash_attn" (FlashAttention): logical [2, num_blocks, block_size, kv_heads, head_size];
  stride orders NHD (0, 1, 2, 3, 4) and HND (0, 1, 3, 2, 4), and the per-layer views of the
  cross-layer allocation (blocks outermost, then NHD or HND).
- "flashinfer" (FlashInfer; also TRITON_ATTN, which declares the same shape): logical
  [num_blocks, 2, block_size, kv_heads, head_size]; NHD (0, 1, 2, 3, 4), HND (0, 1, 3, 2, 4) and
  the cross-layer HND view.
- "mla" (the MLA backends, vllm/v1/attention/backends/mla/): logical [num_blocks, block_size,
  head_size], one latent vector per token and no V. kvcodec codes K and V of one shape, so the
  latent is split in two halves: K = channels [0, head_size/2), V = [head_size/2, head_size),
  with kv_heads = 1. ``scatter`` joins them back.

Strides may leave gaps between blocks (padded pages, other layers' data in a cross-layer
allocation), never overlap. Anything else (another rank, an undeclared stride order, a block id
out of range, more tokens than the listed blocks hold) is a ValueError. The backend is read from
the shape and strides; a cache whose shape fits two backends (num_blocks == 2 with both leading
axes of size 2 and matching strides) needs ``backend=``. ``backend=`` and ``layout=`` ("NHD" or
"HND"), when given, are checked against the tensor, never trusted in its place.

``gather`` reads one sequence's first ``num_tokens`` tokens out of the layers' caches as K and
V shaped [layers, tokens, kv_heads, head_dim] (what ``kvcodec.encode`` takes); ``scatter`` writes
K and V (what ``kvcodec.decode`` gives) into the caches at a block table, touching no other slot.
Both work on numpy arrays and on torch tensors (on any device).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._arrays import torch_of

BACKENDS = ("flash_attn", "flashinfer", "mla")
LAYOUTS = ("NHD", "HND")
_ALIASES = {"triton_attn": "flashinfer"}

# Logical axis names per backend, in the order of the backend's get_kv_cache_shape.
_AXES = {
    "flash_attn": ("kv", "block", "token", "head", "dim"),
    "flashinfer": ("block", "kv", "token", "head", "dim"),
    "mla": ("block", "token", "dim"),
}

# (backend, layout name, physical order of the logical axes, outermost first). The per-layer
# view of a cross-layer allocation (include_num_layers_dimension=True) keeps the layer's logical
# shape but puts the blocks axis outermost, with the other layers' data between its steps.
_DECLARED = (
    ("flash_attn", "NHD", (0, 1, 2, 3, 4)),
    ("flash_attn", "HND", (0, 1, 3, 2, 4)),
    ("flash_attn", "NHD", (1, 0, 2, 3, 4)),  # cross-layer (num_blocks, num_layers, 2, bs, H, D)
    ("flash_attn", "HND", (1, 3, 0, 2, 4)),  # cross-layer (num_blocks, H, num_layers, 2, bs, D)
    ("flashinfer", "NHD", (0, 1, 2, 3, 4)),
    ("flashinfer", "HND", (0, 1, 3, 2, 4)),
    ("flashinfer", "HND", (0, 3, 1, 2, 4)),  # cross-layer (num_blocks, H, num_layers, 2, bs, D)
    ("mla", "NHD", (0, 1, 2)),
)


@dataclass(frozen=True)
class PagedCache:
    """What ``describe`` read from one layer's cache tensor."""

    backend: str
    layout: str
    num_blocks: int
    block_size: int
    kv_heads: int
    head_dim: int  # per K (and V); for MLA, half the latent's head_size


def describe(cache, *, backend: str | None = None, layout: str | None = None) -> PagedCache:
    """The backend, layout and sizes of one layer's vLLM cache tensor, read from its shape and
    strides; ValueError when it is none of the declared layouts, or fits several backends."""
    shape = tuple(int(d) for d in cache.shape)
    backend = _ALIASES.get(backend, backend)
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS + tuple(_ALIASES)}, not {backend!r}")
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    if len(shape) not in (3, 5):
        raise ValueError(f"a vLLM layer cache has 5 dimensions (3 for MLA), not {len(shape)}: shape {shape}")
    strides = _element_strides(cache)
    matches = []
    for name, layout_name, order in _DECLARED:
        if len(order) != len(shape) or (backend is not None and name != backend):
            continue
        axes = _AXES[name]
        if "kv" in axes and shape[axes.index("kv")] != 2:
            continue
        if _fits(shape, strides, order):
            matches.append((name, layout_name))
    if not matches:
        wanted = f"the {backend} backend's" if backend else "any vLLM backend's"
        raise ValueError(f"shape {shape} with strides {strides} (elements) is not {wanted} declared layout "
                         f"(shape, stride order)")
    names = sorted({name for name, _ in matches})
    if len(names) > 1:
        raise ValueError(f"shape {shape} with strides {strides} fits both {names[0]} and {names[1]} "
                         f"(num_blocks == 2): pass backend=")
    name = names[0]
    layouts = sorted({layout_name for _, layout_name in matches})
    if layout is not None and layout not in layouts:
        raise ValueError(f"layout={layout!r} does not match the strides {strides} of this {name} cache "
                         f"(they are {' or '.join(layouts)})")
    dims = dict(zip(_AXES[name], shape))
    if name == "mla":
        if dims["dim"] % 2:
            raise ValueError(f"an MLA latent of odd size {dims['dim']} cannot be split into K and V halves")
        return PagedCache(name, "NHD", dims["block"], dims["token"], 1, dims["dim"] // 2)
    # With one head or one-token blocks NHD and HND are the same memory; report the asked one.
    chosen = layout if layout is not None else ("NHD" if "NHD" in layouts else layouts[0])
    return PagedCache(name, chosen, dims["block"], dims["token"], dims["head"], dims["dim"])


def gather(kv_caches, block_table, num_tokens: int, *, backend: str | None = None, layout: str | None = None):
    """(k, v), each [layers, num_tokens, kv_heads, head_dim], of one sequence."""
    caches, info = _layers(kv_caches, backend, layout)
    block, offset = _slots(caches[0], info, block_table, num_tokens)
    ks, vs = [], []
    for cache in caches:
        k, v = _read(cache, info, block, offset)
        ks.append(k)
        vs.append(v)
    stack = _stack_fn(caches[0])
    return stack(ks), stack(vs)


def scatter(k, v, kv_caches, block_table, *, backend: str | None = None, layout: str | None = None) -> None:
    """Writes k and v ([layers, tokens, kv_heads, head_dim]) into the caches in place."""
    caches, info = _layers(kv_caches, backend, layout)
    expected = (len(caches), int(k.shape[1]) if len(k.shape) == 4 else -1, info.kv_heads, info.head_dim)
    if tuple(k.shape) != expected or tuple(v.shape) != expected:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must both be [layers={len(caches)}, tokens, "
                         f"kv_heads={info.kv_heads}, head_dim={info.head_dim}] for this {info.backend} cache")
    block, offset = _slots(caches[0], info, block_table, int(k.shape[1]))
    for layer, cache in enumerate(caches):
        _write(cache, info, block, offset, _like(k[layer], cache), _like(v[layer], cache))


def _layers(kv_caches, backend, layout):
    if isinstance(kv_caches, dict):
        raise ValueError("pass the layers' cache tensors as a list in layer order, not a dict")
    caches = list(kv_caches)
    if not caches:
        raise ValueError("no layers")
    info = describe(caches[0], backend=backend, layout=layout)
    first = (tuple(caches[0].shape), _element_strides(caches[0]), caches[0].dtype)
    for i, cache in enumerate(caches[1:], 1):
        if (tuple(cache.shape), _element_strides(cache), cache.dtype) != first:
            raise ValueError(f"layer {i} differs from layer 0 in shape, strides or dtype: "
                             f"{tuple(cache.shape)} {_element_strides(cache)} {cache.dtype} and "
                             f"{first[0]} {first[1]} {first[2]}")
    return caches, info


def _element_strides(cache):
    """Strides in elements (numpy counts bytes, torch elements)."""
    if torch_of(cache) is not None:
        return tuple(int(s) for s in cache.stride())
    itemsize = cache.itemsize
    if any(s % itemsize for s in cache.strides):
        raise ValueError(f"strides {cache.strides} are not whole elements")
    return tuple(int(s) // itemsize for s in cache.strides)


def _fits(shape, strides, order) -> bool:
    """Whether memory laid out in ``order`` (outermost first) explains the strides: each axis
    steps over at least a whole element of the next inner one (gaps allowed, no overlap).
    Axes of size 1 have no meaningful stride and are skipped."""
    inner_extent = 1
    for axis in reversed(order):
        if shape[axis] == 1:
            continue
        if strides[axis] < inner_extent:
            return False
        inner_extent = strides[axis] * shape[axis]
    return True


def _slots(cache, info, block_table, num_tokens):
    """Per token, its block id and its offset in the block, as index arrays of the cache's kind."""
    if hasattr(block_table, "tolist"):
        block_table = block_table.tolist()
    table = [int(b) for b in block_table]
    num_tokens = int(num_tokens)
    if num_tokens < 0 or num_tokens > len(table) * info.block_size:
        raise ValueError(f"{num_tokens} tokens do not fit {len(table)} blocks of {info.block_size}")
    used = table[:-(-num_tokens // info.block_size)] if num_tokens else []
    bad = [b for b in used if not 0 <= b < info.num_blocks]
    if bad:
        raise ValueError(f"block id {bad[0]} is outside 0..{info.num_blocks - 1}")
    if len(set(used)) != len(used):
        raise ValueError(f"the block table lists a block twice: {used}")
    block = [used[t // info.block_size] for t in range(num_tokens)]
    offset = [t % info.block_size for t in range(num_tokens)]
    torch = torch_of(cache)
    if torch is not None:
        return (torch.tensor(block, dtype=torch.long, device=cache.device),
                torch.tensor(offset, dtype=torch.long, device=cache.device))
    import numpy as np

    return np.asarray(block, dtype=np.int64), np.asarray(offset, dtype=np.int64)


# Indexing the logical view is what vLLM's reshape_and_cache does, so the strides place every
# element where the backend's kernels read it. Adjacent advanced indices put the token axis first
# in numpy and torch alike: every read gives [tokens, kv_heads, head_dim] ([tokens, head_size]
# for MLA).
def _read(cache, info, block, offset):
    if info.backend == "flash_attn":
        return cache[0, block, offset], cache[1, block, offset]
    if info.backend == "flashinfer":
        return cache[block, 0, offset], cache[block, 1, offset]
    latent = cache[block, offset]
    half = info.head_dim
    return latent[:, None, :half], latent[:, None, half:]


def _write(cache, info, block, offset, k, v):
    if info.backend == "flash_attn":
        cache[0, block, offset] = k
        cache[1, block, offset] = v
    elif info.backend == "flashinfer":
        cache[block, 0, offset] = k
        cache[block, 1, offset] = v
    else:
        half = info.head_dim
        cache[block, offset, :half] = k[:, 0]
        cache[block, offset, half:] = v[:, 0]


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

    if torch_of(values) is not None:
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=cache.dtype)
