"""Ops that move elements between dims or positions of a split block.

``cat``/``stack``, ``repeat``, ``expand``, slicing, ``view``/``reshape``/``flatten`` and
friends, ``permute``/``transpose`` and ops along one unsplit dim (``softmax``,
``cumsum``, ``split`` ...): each is computed as on the global tensor where the
result has a block layout (re-partitioned to the standard blocks by
:func:`~.redistribute.redistribute_along` where needed), or refused naming the
op and the split dim. ``pad`` is in :mod:`.pad`, ``interpolate`` in :mod:`.resample`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from sciml.spatial_parallel.partition import block_bounds
from sciml.spatial_parallel.replicated import is_replicated
from sciml.spatial_parallel.split.along import ALONG_SPLIT, along_split
from sciml.spatial_parallel.split.binding import bind
from sciml.spatial_parallel.split.crossings import block_of, replicated_op, split_use
from sciml.spatial_parallel.split.folded import fold_reshape
from sciml.spatial_parallel.split.op_names import refuse
from sciml.spatial_parallel.split.redistribute import gather_whole, redistribute_along
from sciml.spatial_parallel.split.reshaped import reshaped_split
from sciml.spatial_parallel.split.tensor import (
    Handler,
    SplitContext,
    SplitTensor,
    first_split,
    global_result,
    local_shape,
    map_tensors,
    tensors_in,
    unwrap,
    wrap_replicated,
    wrap_split,
)


# reshapes ------------------------------------------------------------------------------------
def _reshape(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = first_split(func, args, kwargs)
    gout = tuple(global_result(func, args, kwargs).shape)
    split = reshaped_split(x._gshape, gout, x._split, ctx.mesh.grid)
    if split is None:  # split dims merged: folded, else (blocks astride) whole on every rank
        folded = fold_reshape(ctx, unwrap(x), x._gshape, x._split, gout)
        if folded is not None:
            return folded
        whole = wrap_replicated(gather_whole(ctx, unwrap(x), x._split, x._gshape), ctx)
        return replicated_op(func, (whole, *args[1:]), kwargs)
    target = ctx.local_shape(gout, split)
    plain = unwrap(x)
    name = getattr(func, "__name__", "")
    out = plain.view(target) if name in ("view", "view_as") else plain.reshape(target)
    return wrap_split(out, ctx, gout, split)


def _permute(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = first_split(func, args, kwargs)
    probe = torch.empty([2 + d for d in range(len(x._gshape))], device="meta")
    order = [s - 2 for s in global_result(func, (probe, *args[1:]), kwargs).shape]
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
        glob = global_result(func, args, kwargs)
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
def cat(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tensors = list(args[0] if args else kwargs["tensors"])
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    first = next(t for t in tensors if isinstance(t, SplitTensor))
    ndim = len(first._gshape)
    dim %= ndim
    split_dims = dict(first._split)
    # a whole plain operand of the same rank (a class token): its block, as if sharded
    tensors = [
        wrap_split(block_of(t, ctx, first._split), ctx, tuple(t.shape), first._split)
        if isinstance(t, torch.Tensor) and not isinstance(t, SplitTensor) and t.dim() == ndim
        else t
        for t in tensors
    ]
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
        out = redistribute_along(ctx, out, dim, axis, tuple(tuple(p) for p in pieces), gshape[dim])
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


# slicing -------------------------------------------------------------------------------------
def getitem(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
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
        out = redistribute_along(ctx, out, d, axis, pieces, count)
    return wrap_split(out, ctx, tuple(gshape), tuple(out_split))


def _expand(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = args[0]
    if not isinstance(x, SplitTensor):  # plain.expand_as(block): this rank's block of it
        other = args[1] if len(args) > 1 else kwargs["other"]
        block = block_of(x, ctx, other._split, other._gshape)
        return wrap_split(block, ctx, other._gshape, other._split)
    gout = tuple(global_result(func, args, kwargs).shape)
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
            x = cat(ctx, torch.cat, ([x] * repeats[dim + shift], dim), {})
            repeats[dim + shift] = 1
    gout = tuple(r * s for r, s in zip(repeats, (1,) * shift + x._gshape, strict=True))
    split = tuple((d + shift, a) for d, a in x._split)
    return wrap_split(unwrap(x).repeat(repeats), ctx, gout, split)


def _on_last_dims(
    ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``F.layer_norm`` and ``F.linear`` over unsplit last dims: on the block as it is.

    Tokens, windows and channels last; a replicated weight's gradient is summed over
    the group.
    """
    x = first_split(func, args, kwargs)
    arguments = bind(func, args, kwargs).arguments
    last = len(arguments["normalized_shape"]) if "normalized_shape" in arguments else 1
    first = len(x._gshape) - last
    crossed = sorted(d for d, _ in x._split if d >= first)
    if crossed:
        what = "normalises over" if "normalized_shape" in arguments else "transforms"
        raise refuse(
            func,
            x._split,
            f"it {what} dim {crossed[0]}, which is split; only unsplit (channel) last dims can be",
        )
    if any(isinstance(t, SplitTensor) and t is not x for t in tensors_in(args[1:])):
        raise refuse(func, x._split, "its weight is split; shard only the input")

    def plain(t: torch.Tensor) -> torch.Tensor:
        return split_use(t, ctx) if is_replicated(t) else unwrap(t)

    values = map_tensors(tuple(kwargs.values()), plain)
    out = func(*map_tensors(args, plain), **dict(zip(kwargs, values, strict=True)))
    gshape = tuple(global_result(func, args, kwargs).shape)
    return wrap_split(out, ctx, gshape, x._split)


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
#: Handlers by op name (with those of :mod:`.pad` and :mod:`.resample`: ``dispatch.HANDLERS``).
HANDLERS: dict[str, Callable[..., Any]] = {
    **dict.fromkeys(_RESHAPES, _reshape),
    **dict.fromkeys(_PERMUTES, _permute),
    **_ALONG,
    "cat": cat,
    "concat": cat,
    "concatenate": cat,
    "stack": _stack,
    "getitem": getitem,
    "expand": _expand,
    "repeat": _repeat,
    "layer_norm": _on_last_dims,
    "linear": _on_last_dims,
    "expand_as": _expand,
    "broadcast_to": _expand,
}
__all__ = ["HANDLERS"]
