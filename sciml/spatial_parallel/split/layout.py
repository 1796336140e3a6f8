"""Ops that move elements between dims or positions of a split block.

``pad``, ``cat``/``stack``, ``repeat``, ``expand``, slicing, ``view``/``reshape``/``flatten`` and
friends, ``permute``/``transpose``, ``interpolate`` (nearest) and ops along
one unsplit dim (``softmax``, ``cumsum``, ``split`` ...): each is computed
as on the global tensor where the result has a block layout (re-partitioned
to the standard blocks by :func:`~.split_redistribute.redistribute` where
needed), or refused naming the op and the split dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sciml.spatial_parallel.layers.adaptive import adaptive_avg_pool
from sciml.spatial_parallel.layers.upsample import SpatialUpsample
from sciml.spatial_parallel.partition import block_bounds
from sciml.spatial_parallel.replicated import is_replicated
from sciml.spatial_parallel.split.along import ALONG_SPLIT, along_split
from sciml.spatial_parallel.split.binding import bind
from sciml.spatial_parallel.split.redistribute import redistribute
from sciml.spatial_parallel.split.tensor import (
    Handler,
    Shape,
    Split,
    SplitContext,
    SplitTensor,
    first_split,
    local_shape,
    refuse,
    split_use,
    tensors_in,
    unwrap,
    wrap_split,
)


def _meta(x: Any) -> Any:
    if isinstance(x, SplitTensor):
        return torch.empty(x._gshape, dtype=x.dtype, device="meta")
    if isinstance(x, torch.Tensor):
        return torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
    if isinstance(x, list | tuple):
        return type(x)(_meta(v) for v in x)
    return x


def _global_result(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func`` on meta tensors of the global shapes (the global result's shapes)."""
    return func(*_meta(args), **{k: _meta(v) for k, v in kwargs.items()})


def _move(ctx: SplitContext, x: torch.Tensor, dim: int, axis: int, pieces: Any, size: int) -> Any:
    """Re-partition ``x`` (this rank's pieces along ``dim``) to the standard blocks."""
    coord = ctx.mesh.spatial_coords[axis]
    return redistribute(x, dim, pieces, size, coord=coord, group=ctx.mesh.dim_groups[axis])


# reshapes ------------------------------------------------------------------------------------
def _reshaped_split(gin: Shape, gout: Shape, split: Split) -> Split | None:
    """Where each split dim lands in a row-major reshape ``gin -> gout``, or None if it mixes."""
    result = []
    for dim, axis in split:
        before = math.prod(gin[:dim])
        prefix, found = 1, None
        for j, size in enumerate(gout):
            if prefix == before and size == gin[dim]:
                found = j
                break
            prefix *= size
        if found is None:
            return None
        result.append((found, axis))
    return tuple(result)


def _reshape(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = first_split(func, args, kwargs)
    gout = tuple(_global_result(func, args, kwargs).shape)
    split = _reshaped_split(x._gshape, gout, x._split)
    if split is None:
        raise refuse(
            func,
            x._split,
            f"reshaping the global {x._gshape} to {gout} mixes a split dim with others; "
            f"keep each split dim whole and in place relative to the dims around it",
        )
    target = ctx.local_shape(gout, split)
    plain = unwrap(x)
    name = getattr(func, "__name__", "")
    out = plain.view(target) if name in ("view", "view_as") else plain.reshape(target)
    return wrap_split(out, ctx, gout, split)


def _permute(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = first_split(func, args, kwargs)
    probe = torch.empty([2 + d for d in range(len(x._gshape))], device="meta")
    order = [s - 2 for s in _global_result(func, (probe, *args[1:]), kwargs).shape]
    split = tuple(sorted((order.index(d), a) for d, a in x._split))
    gout = tuple(x._gshape[d] for d in order)
    return wrap_split(func(unwrap(x), *args[1:], **kwargs), ctx, gout, split)


# ops along one unsplit dim -------------------------------------------------------------------
def _along(position: int, default: Any, *, names: tuple[str, ...] = ("dim",)) -> Handler:
    """A handler for an op acting along the dim(s) of argument ``position`` (or keyword)."""

    def handler(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        first = next(t for t in tensors_in(args) if isinstance(t, SplitTensor))
        ndim = len(first._gshape)
        value = next((kwargs[n] for n in names if n in kwargs), None)
        if value is None:
            value = args[position] if len(args) > position else default
        if value is None:
            raise refuse(func, first._split, "without a dim it acts on the flattened tensor")
        dims = {d % ndim for d in ([value] if isinstance(value, int) else value)}
        crossed = dims & {d for d, _ in first._split}
        if crossed and str(func.__name__) in ALONG_SPLIT and args and args[0] is first:
            return along_split(ctx, func, args, kwargs, value)
        if crossed:
            raise refuse(
                func,
                first._split,
                f"it acts along dim {sorted(crossed)[0]}, which is split; only unsplit "
                f"(batch, channel) dims are supported",
            )
        for t in tensors_in(args):
            if isinstance(t, SplitTensor) and (t._split, _split_sizes(t)) != (
                first._split,
                _split_sizes(first),
            ):
                raise refuse(func, first._split, "its split operands differ in layout")
            if not isinstance(t, SplitTensor) and t is not args[0] and t.dim() == ndim:
                raise refuse(func, first._split, "it mixes a split block with an unsplit tensor")
        glob = _global_result(func, args, kwargs)
        out = func(*_unwrapped(args), **{k: unwrap(v) for k, v in kwargs.items()})
        removed = min(dims) if dims else ndim

        def wrap(o: Any, g: Any) -> Any:
            if isinstance(o, tuple | list):
                return type(o)(wrap(a, b) for a, b in zip(o, g, strict=True))
            if not isinstance(o, torch.Tensor):
                return o
            shift = len(g.shape) - ndim
            split = tuple((d + shift if d > removed else d, a) for d, a in first._split)
            expected = ctx.local_shape(tuple(g.shape), split)
            if local_shape(o) != expected:
                raise refuse(func, first._split, f"gave a block of shape {local_shape(o)}")
            return wrap_split(o, ctx, tuple(g.shape), split)

        return wrap(out, glob)

    return handler


def _split_sizes(t: SplitTensor) -> tuple[int, ...]:
    return tuple(t._gshape[d] for d, _ in t._split)


def _unwrapped(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        type(a)(unwrap(v) for v in a) if isinstance(a, list | tuple) else unwrap(a) for a in args
    )


# concatenation -------------------------------------------------------------------------------
def _cat(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tensors = list(args[0] if args else kwargs["tensors"])
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    first = next(t for t in tensors if isinstance(t, SplitTensor))
    ndim = len(first._gshape)
    dim %= ndim
    split_dims = dict(first._split)
    for t in tensors:
        same = isinstance(t, SplitTensor) and t._split == first._split
        sizes = isinstance(t, SplitTensor) and all(
            t._gshape[d] == first._gshape[d] for d in split_dims if d != dim
        )
        if not (same and sizes):
            got = t._gshape if isinstance(t, SplitTensor) else f"unsplit {tuple(t.shape)}"
            raise refuse(
                func,
                first._split,
                f"every operand must be a block split the same way with equal global sizes "
                f"along the other split dims; got {first._gshape} and {got}",
            )
    blocks = [unwrap(t) for t in tensors]
    out = torch.cat(blocks, dim)
    gshape = list(first._gshape)
    gshape[dim] = sum(t._gshape[dim] for t in tensors)
    if dim in split_dims:
        axis = split_dims[dim]
        pieces: list[list[tuple[int, int]]] = [[] for _ in range(ctx.mesh.grid[axis])]
        offset = 0
        for t in tensors:
            for coord, (lo, hi) in enumerate(block_bounds(t._gshape[dim], ctx.mesh.grid[axis])):
                pieces[coord].append((offset + lo, offset + hi))
            offset += t._gshape[dim]
        out = _move(ctx, out, dim, axis, tuple(tuple(p) for p in pieces), gshape[dim])
    return wrap_split(out, ctx, tuple(gshape), first._split)


def _stack(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tensors = list(args[0] if args else kwargs["tensors"])
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    first = next(t for t in tensors if isinstance(t, SplitTensor))
    dim %= len(first._gshape) + 1
    for t in tensors:
        if not (
            isinstance(t, SplitTensor) and (t._gshape, t._split) == (first._gshape, first._split)
        ):
            raise refuse(
                func, first._split, "every operand must be a block of the same global shape"
            )
    out = torch.stack([unwrap(t) for t in tensors], dim)
    gshape = (*first._gshape[:dim], len(tensors), *first._gshape[dim:])
    split = tuple((d + (d >= dim), a) for d, a in first._split)
    return wrap_split(out, ctx, gshape, split)


# padding -------------------------------------------------------------------------------------
def _pad(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
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
    return _move(ctx, x, dim, axis, tuple(pieces), new)


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
        head, tail = (_getitem(ctx, func, (x, index), {}) if n else None for index, n in ends)
        parts = [t for t in (head, x, tail) if t is not None]
        if len(parts) > 1:
            joined = _cat(ctx, func, (parts, dim), {})
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


# slicing -------------------------------------------------------------------------------------
def _getitem(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x, index = first_split(func, args, kwargs), args[1]
    items = list(index) if isinstance(index, tuple) else [index]
    if any(
        not isinstance(i, int | slice | type(None) | type(Ellipsis)) or isinstance(i, bool)
        for i in items
    ):
        raise refuse(func, x._split, "indexing with tensors, lists or booleans is not supported")
    ndim = len(x._gshape)
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (ndim - used)
    items += [slice(None)] * (ndim - sum(1 for i in items if i is not None))
    split = dict(x._split)
    local: list[Any] = []
    gshape: list[int] = []
    out_split: list[tuple[int, int]] = []
    moves: list[tuple[int, int, Any, int]] = []
    dim = 0
    for item in items:
        if item is None:
            local.append(None)
            gshape.append(1)
            continue
        if dim >= ndim:
            break
        size = x._gshape[dim]
        if isinstance(item, int):
            if dim in split:
                raise refuse(func, x._split, f"an integer index on split dim {dim}")
            local.append(item)
        elif dim not in split:
            local.append(item)
            gshape.append(len(range(*item.indices(size))))
        else:
            start, stop, step = item.indices(size)
            count = len(range(start, stop, step))
            pieces = []
            for c, (a, b) in enumerate(block_bounds(size, ctx.mesh.grid[split[dim]])):
                first = start if a <= start else start + -(-(a - start) // step) * step
                last = min(b, stop)
                n = len(range(first, last, step)) if first < last else 0
                k = (first - start) // step if n else min(count, max(0, -(-(a - start) // step)))
                pieces.append(((k, k + n),))
                if c == ctx.mesh.spatial_coords[split[dim]]:
                    local.append(slice(first - a, first - a + n * step, step) if n else slice(0, 0))
            out_split.append((len(gshape), split[dim]))
            moves.append((len(gshape), split[dim], tuple(pieces), count))
            gshape.append(count)
        dim += 1
    out = unwrap(x)[tuple(local)]
    for d, axis, pieces, count in moves:
        out = _move(ctx, out, d, axis, pieces, count)
    return wrap_split(out, ctx, tuple(gshape), tuple(out_split))


# interpolation -------------------------------------------------------------------------------
def _interpolate(
    ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    x = first_split(func, args, kwargs)
    names = ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias")
    options = dict(zip(names, args[1:], strict=False)) | kwargs
    mode = options.get("mode", "nearest")
    if mode == "trilinear" and not options.get("antialias"):
        return _trilinear(ctx, func, x, options)
    if mode not in ("nearest", "nearest-exact"):
        raise refuse(
            func,
            x._split,
            f"mode={mode!r} is not computed on blocks; use nn.Upsample (parallelize swaps it "
            f"for its halo-exchanging version), mode='trilinear' or mode='nearest'",
        )
    gout = tuple(_global_result(func, args, kwargs).shape)
    spatial = len(x._gshape) - 2
    if any(d < 2 for d, _ in x._split):
        raise refuse(func, x._split, "it interpolates dims 2..; the batch or channel dim is split")
    out = unwrap(x)
    split = dict(x._split)
    for dim in range(2, 2 + spatial):
        single = [1] * spatial
        single[dim - 2] = x._gshape[dim]
        probe = torch.arange(x._gshape[dim], dtype=torch.float64).reshape(1, 1, *single)
        scale = options.get("scale_factor")
        if scale is not None and not options.get("recompute_scale_factor"):
            factor = scale[dim - 2] if isinstance(scale, tuple | list) else scale
            target: dict[str, Any] = {
                "scale_factor": [1.0] * (dim - 2) + [factor] + [1.0] * (1 + spatial - dim)
            }
        else:
            target = {"size": [1] * (dim - 2) + [gout[dim]] + [1] * (1 + spatial - dim)}
        source = F.interpolate(probe, mode=mode, **target).reshape(-1).long()
        if dim not in split:
            out = out.index_select(dim, source.to(out.device))
            continue
        axis = split[dim]
        blocks = block_bounds(x._gshape[dim], ctx.mesh.grid[axis])
        pieces = []
        for a, b in blocks:
            inside = ((source >= a) & (source < b)).nonzero().reshape(-1)
            lo = int(inside[0]) if len(inside) else int((source < a).sum())
            pieces.append(((lo, lo + len(inside)),))
        lo, hi = pieces[ctx.mesh.spatial_coords[axis]][0]
        a = blocks[ctx.mesh.spatial_coords[axis]][0]
        out = out.index_select(dim, (source[lo:hi] - a).to(out.device))
        out = _move(ctx, out, dim, axis, tuple(pieces), gout[dim])
    return wrap_split(out, ctx, gout, x._split)


def _trilinear(ctx: SplitContext, func: Any, x: SplitTensor, options: dict[str, Any]) -> Any:
    """Trilinear ``interpolate`` of a volume block: the split ``Upsample`` layer's halo reads."""
    if len(x._gshape) != 5 or any(d != a + 2 for d, a in x._split):
        raise refuse(func, x._split, "trilinear interpolation takes an (N, C, D, H, W) volume")
    key = tuple(
        repr(options.get(k))
        for k in ("size", "scale_factor", "align_corners", "recompute_scale_factor")
    )
    layer = ctx.helpers.get(key)
    if layer is None:
        upsample = nn.Upsample(
            size=options.get("size"),
            scale_factor=options.get("scale_factor"),
            mode="trilinear",
            align_corners=options.get("align_corners"),
            recompute_scale_factor=options.get("recompute_scale_factor"),
        )
        layer = ctx.helpers[key] = SpatialUpsample.from_module(
            upsample, ctx.mesh, name="F.interpolate"
        )
    layer._traced = x._gshape
    out = layer(unwrap(x))
    sizes = [size for size, _ in layer._sizes(x._gshape[2:])]
    return wrap_split(out, ctx, (*x._gshape[:2], *sizes), x._split)


def _adaptive_avg_pool(
    ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``F.adaptive_avg_pool3d`` of a volume block to any size, split as the input."""
    x = first_split(func, args, kwargs)
    if len(x._gshape) != 5 or any(d != a + 2 for d, a in x._split):
        raise refuse(func, x._split, "adaptive pooling takes an (N, C, D, H, W) volume")
    gout = tuple(_global_result(func, args, kwargs).shape)
    out = adaptive_avg_pool(ctx.mesh, unwrap(x), x._gshape[2:], gout[2:])
    return wrap_split(out, ctx, gout, x._split)


def _expand(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = args[0]
    if not isinstance(x, SplitTensor):  # plain.expand_as(block): this rank's block of it
        other = args[1] if len(args) > 1 else kwargs["other"]
        plain = split_use(x, ctx) if is_replicated(x) else x
        full = plain.expand(other._gshape)
        for dim, axis in other._split:
            lo, hi = ctx.bounds(other._gshape[dim], axis)
            full = full.narrow(dim, lo, hi - lo)
        return wrap_split(full, ctx, other._gshape, other._split)
    gout = tuple(_global_result(func, args, kwargs).shape)
    shift = len(gout) - len(x._gshape)
    split = tuple((d + shift, a) for d, a in x._split)
    return wrap_split(unwrap(x).expand(ctx.local_shape(gout, split)), ctx, gout, split)


def _repeat(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``repeat``: copies along a split dim concatenated globally, the rest on the block."""
    x = args[0]
    repeats = list(bind(func, args, kwargs).arguments["repeats"])
    shift = len(repeats) - len(x._gshape)
    for dim, _ in x._split:
        if repeats[dim + shift] > 1:
            x = _cat(ctx, torch.cat, ([x] * repeats[dim + shift], dim), {})
            repeats[dim + shift] = 1
    gout = tuple(r * s for r, s in zip(repeats, (1,) * shift + x._gshape, strict=True))
    split = tuple((d + shift, a) for d, a in x._split)
    return wrap_split(unwrap(x).repeat(repeats), ctx, gout, split)


_RESHAPES = (
    "view",
    "reshape",
    "flatten",
    "unflatten",
    "squeeze",
    "unsqueeze",
    "view_as",
    "reshape_as",
    "ravel",
)
_PERMUTES = ("permute", "transpose", "movedim", "moveaxis", "swapaxes", "swapdims", "transpose_")
_ALONG: dict[str, Handler] = {
    "softmax": _along(1, None),
    "log_softmax": _along(1, None),
    "softmin": _along(1, None),
    "cumsum": _along(1, None),
    "cumprod": _along(1, None),
    "cummax": _along(1, None),
    "cummin": _along(1, None),
    "logcumsumexp": _along(1, None),
    "argmax": _along(1, None),
    "argmin": _along(1, None),
    "argsort": _along(1, -1),
    "sort": _along(1, -1),
    "topk": _along(2, -1),
    "flip": _along(1, None, names=("dims",)),
    "roll": _along(2, None, names=("dims",)),
    "narrow": _along(1, None),
    "split": _along(2, 0),
    "chunk": _along(2, 0),
    "tensor_split": _along(2, 0),
    "unbind": _along(1, 0),
    "select": _along(1, None),
    "index_select": _along(1, None),
    "glu": _along(1, -1),
    "normalize": _along(2, 1),
    "cosine_similarity": _along(2, 1, names=("dim",)),
    "repeat_interleave": _along(2, None),
}
#: Handlers by op name.
HANDLERS: dict[str, Callable[..., Any]] = {
    **dict.fromkeys(_RESHAPES, _reshape),
    **dict.fromkeys(_PERMUTES, _permute),
    **_ALONG,
    "cat": _cat,
    "concat": _cat,
    "concatenate": _cat,
    "stack": _stack,
    "pad": _pad,
    "getitem": _getitem,
    "interpolate": _interpolate,
    "upsample": _interpolate,
    "expand": _expand,
    "adaptive_avg_pool3d": _adaptive_avg_pool,
    "repeat": _repeat,
    "expand_as": _expand,
    "broadcast_to": _expand,
}
__all__ = ["HANDLERS"]
