"""``F.pad`` of a split block, as on the global tensor: every mode, negative crops included.

Along a split dim the global tensor's edges are padded by the edge ranks and the
blocks re-partitioned to the standard ones (constant, replicate, reflect), or
the global tensor's far ends are joined on (circular, a periodic longitude).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from sciml.spatial_parallel.partition import block_bounds
from sciml.spatial_parallel.split.layout import cat, getitem
from sciml.spatial_parallel.split.op_names import refuse
from sciml.spatial_parallel.split.redistribute import redistribute_along
from sciml.spatial_parallel.split.tensor import (
    Split,
    SplitContext,
    SplitTensor,
    first_split,
    local_shape,
    unwrap,
    wrap_split,
)


def pad_blocks(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``F.pad`` of a split block: the unsplit dims on the block, the split ones globally."""
    x = first_split(func, args, kwargs)
    pad = list(args[1] if len(args) > 1 else kwargs["pad"])
    mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
    value = args[3] if len(args) > 3 else kwargs.get("value")
    ndim = len(x._gshape)
    if len(pad) % 2 or len(pad) > 2 * ndim:  # torch's own checks, which no local call may reach
        raise ValueError(
            f"F.pad: the padding length must be even and at most 2 x the input's {ndim} dims, "
            f"got {len(pad)}"
        )
    if mode == "circular":
        return _pad_circular(ctx, func, x, pad)
    amounts = {ndim - 1 - i: (pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)}
    split = dict(x._split)
    local = [0] * len(pad)
    for i in range(len(pad) // 2):
        if ndim - 1 - i not in split:
            local[2 * i : 2 * i + 2] = pad[2 * i : 2 * i + 2]
    plain = unwrap(x)
    options = {} if mode != "constant" else {"value": 0.0 if value is None else value}
    if any(local):
        plain = F.pad(plain, local, mode=mode, **options)
    gshape = list(x._gshape)
    for d, s in enumerate(local_shape(plain)):
        if d not in split:
            gshape[d] = s
    for dim, axis in x._split:
        lo_pad, hi_pad = amounts.get(dim, (0, 0))
        if lo_pad == hi_pad == 0:
            continue
        plain = _pad_split(
            ctx, func, plain, dim, axis, gshape[dim], (lo_pad, hi_pad), mode, options, x._split
        )
        gshape[dim] += lo_pad + hi_pad
    return wrap_split(plain, ctx, tuple(gshape), x._split)


def _pad_split(
    ctx: SplitContext,
    func: Any,
    x: torch.Tensor,
    dim: int,
    axis: int,
    size: int,
    amount: tuple[int, int],
    mode: str,
    options: dict[str, Any],
    split: Split,
) -> torch.Tensor:
    """Pad (or crop, negative amounts) the global ``size`` along the split ``dim``."""
    lo_pad, hi_pad = amount
    parts = ctx.mesh.grid[axis]
    blocks = block_bounds(size, parts)
    new = size + lo_pad + hi_pad
    if new < 0:
        raise refuse(func, split, f"pads the global size {size} along dim {dim} to {new} < 0")
    if mode != "constant":
        need = {"replicate": 1, "reflect": 1 + max(lo_pad, hi_pad)}.get(mode)
        edges = (blocks[0][1] - blocks[0][0], blocks[-1][1] - blocks[-1][0])
        if need is None or min(lo_pad, hi_pad) < 0 or min(edges) < need:
            raise refuse(
                func,
                split,
                f"mode={mode!r} along split dim {dim} needs every edge block to hold at least "
                f"{need} elements and no negative pads (edge blocks hold {edges}); "
                f"supported modes there: constant, replicate, reflect",
            )
    coord = ctx.mesh.spatial_coords[axis]
    pieces = []
    for c, (a, b) in enumerate(blocks):
        lo = 0 if c == 0 else min(max(a + lo_pad, 0), new)
        hi = new if c == parts - 1 else min(max(b + lo_pad, 0), new)
        pieces.append(((lo, max(lo, hi)),))
    a, b = blocks[coord]
    keep_lo, keep_hi = max(a, -lo_pad), min(b, size + hi_pad)
    x = x.narrow(dim, keep_lo - a, max(keep_hi - keep_lo, 0))
    edge = [0, 0] * (x.dim() - 2 if mode != "constant" else x.dim() - dim)
    at = 2 * (x.dim() - 1 - dim)
    edge[at] = max(lo_pad, 0) if coord == 0 else 0
    edge[at + 1] = max(hi_pad, 0) if coord == parts - 1 else 0
    if any(edge):
        x = F.pad(x, edge, mode=mode, **options)
    return redistribute_along(ctx, x, dim, axis, tuple(pieces), new)


def _pad_circular(ctx: SplitContext, func: Any, x: SplitTensor, pad: list[int]) -> Any:
    """Circular padding: along a split dim, the global tensor's far ends joined on.

    ``cat([x[size - lo:], x, x[:hi]])`` along each split dim (circular padding is
    separable), through the slicing and ``cat`` handlers, which re-partition the
    wrapped ends to the ranks that need them; the unsplit dims are padded locally.
    """
    ndim = len(x._gshape)
    split = dict(x._split)
    local = [0] * len(pad)
    for i in range(len(pad) // 2):
        dim, (lo, hi) = ndim - 1 - i, pad[2 * i : 2 * i + 2]
        if dim not in split:
            local[2 * i : 2 * i + 2] = [lo, hi]
            continue
        size = x._gshape[dim]
        if min(lo, hi) < 0 or max(lo, hi) > size:
            raise refuse(
                func,
                x._split,
                f"mode='circular' along split dim {dim} needs pads from 0 to the global size "
                f"{size}, got ({lo}, {hi})",
            )
        whole = (slice(None),) * dim
        ends = [((*whole, slice(size - lo, size)), lo), ((*whole, slice(0, hi)), hi)]
        head, tail = (getitem(ctx, func, (x, index), {}) if n else None for index, n in ends)
        parts = [t for t in (head, x, tail) if t is not None]
        if len(parts) > 1:
            joined = cat(ctx, func, (parts, dim), {})
            assert isinstance(joined, SplitTensor)
            x = joined
    if not any(local):
        return x
    plain = F.pad(unwrap(x), local, mode="circular")
    gshape = list(x._gshape)
    for d, s in enumerate(local_shape(plain)):
        if d not in split:
            gshape[d] = s
    return wrap_split(plain, ctx, tuple(gshape), x._split)
