"""Which torch ops a split block takes, and how: the op tables of :class:`SplitTensor`.

Each torch function is classified once by name (metadata, same layout,
pointwise, reduction, layout change, random, or refused) and its handler is
cached. See :mod:`sciml.spatial_parallel.split.tensor` for the contract.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from sciml.spatial_parallel.replicated import is_replicated
from sciml.spatial_parallel.split import contract as split_contract
from sciml.spatial_parallel.split import folded as split_folded
from sciml.spatial_parallel.split import folded_ops as split_folded_ops
from sciml.spatial_parallel.split import layout as split_layout
from sciml.spatial_parallel.split import ops as split_ops
from sciml.spatial_parallel.split.crossings import (
    block_of,
    replicated_op,
    share_first,
    split_use,
)
from sciml.spatial_parallel.split.op_names import (
    DROPOUT,
    PASSTHROUGH,
    POINTWISE,
    RANDOM,
    SAME_LAYOUT,
    SplitOpError,
    aten_name,
    dropout_draws,
    refuse,
    split_names,
    writes_in_place,
)
from sciml.spatial_parallel.split.pad import pad_blocks
from sciml.spatial_parallel.split.resample import adaptive_pool_blocks, interpolate_blocks
from sciml.spatial_parallel.split.tensor import (
    FoldedTensor,
    Handler,
    Split,
    SplitContext,
    SplitTensor,
    dispatch,
    first_split,
    local_shape,
    map_tensors,
    new_arguments,
    set_handler,
    tensors_in,
    unwrap,
    wrap_split,
    write_target,
)

#: Handlers of the ops that move elements, by name.
HANDLERS: dict[str, Handler] = {
    **split_layout.HANDLERS,
    **split_contract.HANDLERS,
    "pad": pad_blocks,
    "interpolate": interpolate_blocks,
    "upsample": interpolate_blocks,
    "adaptive_avg_pool3d": adaptive_pool_blocks,
    "adaptive_max_pool3d": adaptive_pool_blocks,
}
_CACHE: dict[Any, Handler] = {}


def handle(
    func: Any,
    first: SplitTensor | FoldedTensor | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Run ``func`` as on the global tensors (``first``: its first split argument, if any).

    An op that a folded block does not keep (:func:`.folded_ops.on_blocks`) runs on it
    gathered whole.
    """
    if first is None:
        return replicated_op(func, args, kwargs)
    written = kwargs.get("out")
    if written is None and writes_in_place(func, kwargs):
        written = args[0] if args else kwargs.get("input")
    if written is not None and not isinstance(written, SplitTensor | FoldedTensor):
        raise refuse(
            func,
            split_folded.merged_split(first) if isinstance(first, FoldedTensor) else first._split,
            "it writes into a whole tensor that is not split, which would hold only this "
            "rank's block of the result; write into a new tensor (acc = acc + x) instead",
        )
    handler = _CACHE.get(func)
    if handler is None:
        handler = _CACHE[func] = _classify(func)
    if isinstance(first, FoldedTensor):
        out = split_folded_ops.on_blocks(first, func, args, kwargs, pointwise=handler is pointwise)
        if out is not NotImplemented:
            return out
        return dispatch(func, *split_folded.gathered(args, kwargs))
    return handler(first._ctx, func, args, kwargs)


def _tagged_pointwise(name: str) -> bool:
    packet = getattr(torch.ops.aten, name.rstrip("_"), None)
    if packet is None:
        return False
    try:
        return any(torch.Tag.pointwise in getattr(packet, o).tags for o in packet.overloads())
    except (AttributeError, RuntimeError):
        return False


def _classify(func: Any) -> Handler:
    name = aten_name(func)
    special: dict[str, Handler] = {
        "shape": _shape,
        "size": _size,
        "numel": _numel,
        "nelement": _numel,
        "len": _len,
        "repr": _repr,
        "new_zeros": _new,
        "new_ones": _new,
        "new_empty": _new,
        "new_full": _new,
    }
    if name in special:
        return special[name]
    if name in PASSTHROUGH:
        return _plain
    if name in SAME_LAYOUT:
        return _same_layout
    if name in DROPOUT:
        return _dropout
    if name in RANDOM:
        return _random
    if name in ("max", "min"):
        return _max_min
    if name in split_ops.REDUCTIONS:
        return split_ops.reduce
    if name in HANDLERS:
        return HANDLERS[name]
    if name in POINTWISE or _tagged_pointwise(name):
        return pointwise
    return _refused


def _max_min(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``max``/``min``: elementwise against another tensor, else a reduction."""
    if any(isinstance(a, torch.Tensor) for a in args[1:]) or "other" in kwargs:
        return pointwise(ctx, func, args, kwargs)
    return split_ops.reduce(ctx, func, args, kwargs)


def _refused(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    split = next(t for t in tensors_in(args + tuple(kwargs.values())) if isinstance(t, SplitTensor))
    raise refuse(
        func,
        split._split,
        "this op is not known to give the global tensor's result on blocks; compute it "
        "before sharding, after unshard(), or with the supported ops (pointwise, reductions, "
        "pad, cat, stack, slicing, reshape, interpolate)",
    )


def _plain(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return func(*args, **kwargs)


def _shape(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return torch.Size(first_split(func, args, kwargs)._gshape)


def _size(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    shape = torch.Size(first_split(func, args, kwargs)._gshape)
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    return shape if dim is None else shape[dim]


def _numel(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return math.prod(first_split(func, args, kwargs)._gshape)


def _len(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return first_split(func, args, kwargs)._gshape[0]


def _repr(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return SplitTensor.__repr__(first_split(func, args, kwargs))


def _new(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``x.new_zeros(x.shape)``: a block of the new global tensor; any other size: plain."""
    x = first_split(func, args, kwargs)
    size, rest, kwargs = new_arguments(args, kwargs)
    if size != x._gshape:
        return func(unwrap(x), size, *rest, **kwargs)
    local = ctx.local_shape(x._gshape, x._split)
    return wrap_split(func(unwrap(x), local, *rest, **kwargs), ctx, x._gshape, x._split)


def _same_layout(
    ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    if not isinstance(args[0], SplitTensor):  # plain.type_as(block): the block is an option
        return func(*map_tensors(args, unwrap), **kwargs)
    x = args[0]
    out = func(*map_tensors(args, unwrap), **kwargs)
    if out is x or not isinstance(out, torch.Tensor):
        return out
    if local_shape(out) != local_shape(x):
        raise refuse(func, x._split, f"changed the block's shape to {local_shape(out)}")
    return wrap_split(out, ctx, x._gshape, x._split)


def _dropout(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if not dropout_draws(args, kwargs):
        return args[0]
    return _random(ctx, func, args, kwargs)


def _random(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    raise refuse(
        func,
        first_split(func, args, kwargs)._split,
        "each rank would draw its own random values, not its block of the global draw; use "
        "the nn.Dropout/nn.Dropout3d modules (parallelize draws their global mask) or draw "
        "the global tensor and shard it",
    )


def pointwise(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An elementwise op: split partners must share the layout, others broadcast unsplit."""
    if (
        args
        and isinstance(args[0], SplitTensor)
        and not any(  # one tensor: the block's layout
            isinstance(a, torch.Tensor | list | tuple) for a in (*args[1:], *kwargs.values())
        )
    ):
        x = args[0]
        block = write_target(x) if writes_in_place(func, kwargs) else unwrap(x)
        return wrap_split(func(block, *args[1:], **kwargs), ctx, x._gshape, x._split)
    every = tensors_in(args) + tensors_in(tuple(kwargs.values()))
    splits = [t for t in every if isinstance(t, SplitTensor)]
    first = splits[0]
    layout = _common_layout(func, splits)
    target = args[0]
    written = target if isinstance(target, SplitTensor) and writes_in_place(func, kwargs) else None
    if written is not None and any(
        written._gshape[d] < layout[d - len(written._gshape)][1] for d, _ in written._split
    ):
        raise refuse(func, written._split, "an in-place op cannot widen its tensor's size-1 dims")
    whole: dict[int, Split] = {}  # id of a whole operand -> its dims to take the block of
    for operand in every:
        if isinstance(operand, SplitTensor):
            continue
        shape = tuple(operand.shape)
        dims = [neg for neg in layout if len(shape) >= -neg and shape[neg] != 1]
        for neg in dims:
            if shape[neg] != layout[neg][1]:
                raise refuse(
                    func,
                    first._split,
                    f"an unsplit operand of shape {shape} would broadcast against the block "
                    f"along split dim {len(first._gshape) + neg}, whose global size is "
                    f"{layout[neg][1]}; give it that size or 1 there",
                )
        if dims:  # the whole tensor along split dims (a positional encoding): its block
            whole[id(operand)] = tuple((len(shape) + neg, layout[neg][0]) for neg in dims)
    out_dims = max(len(t._gshape) if isinstance(t, SplitTensor) else t.dim() for t in every)

    def plain(t: torch.Tensor) -> torch.Tensor:
        if id(t) in whole:
            return block_of(t, ctx, whole[id(t)])
        if is_replicated(t):
            return split_use(t, ctx)
        if t is written:
            return write_target(t)  # its layout is the result's: nothing to broadcast
        if isinstance(t, SplitTensor):
            return _broadcast_blocks(ctx, t, layout)
        return t

    shapes = [t._gshape if isinstance(t, SplitTensor) else tuple(t.shape) for t in every]
    out = func(
        *map_tensors(args, plain),
        **dict(zip(kwargs, map_tensors(tuple(kwargs.values()), plain), strict=True)),
    )
    gshape = np.broadcast_shapes(*shapes)  # torch's costs a third of a millisecond
    split = tuple((out_dims + neg, axis) for neg, (axis, _) in sorted(layout.items()))
    return _wrap_like(func, ctx, out, gshape, split)


def _common_layout(func: Any, splits: list[SplitTensor]) -> dict[int, tuple[int, int]]:
    """``{dim from the end: (mesh axis, global size)}`` of the broadcast result of ``splits``.

    A split dim of global size 1 broadcasts against a larger one, as on one tensor.
    """
    first = splits[0]
    layout: dict[int, tuple[int, int]] = {}
    for t in splits:
        dims = {d - len(t._gshape): (a, t._gshape[d]) for d, a in t._split}
        if (layout and dims.keys() != layout.keys()) or any(
            a != layout.get(neg, (a, 0))[0] for neg, (a, _) in dims.items()
        ):
            raise _mixed_layouts(func, first, t)
        for neg, (axis, size) in dims.items():
            known = layout.get(neg, (axis, size))[1]
            if size != known and 1 not in (size, known):
                raise _mixed_layouts(func, first, t)
            layout[neg] = (axis, max(size, known))
    return layout


def _mixed_layouts(func: Any, first: SplitTensor, other: SplitTensor) -> SplitOpError:
    return refuse(
        func,
        first._split,
        f"its split operands are blocks of different global shapes or splits "
        f"({first._gshape} split along {split_names(first._split)}, {other._gshape} split "
        f"along {split_names(other._split)})",
    )


def _broadcast_blocks(
    ctx: SplitContext, x: SplitTensor, layout: dict[int, tuple[int, int]]
) -> torch.Tensor:
    """``x``'s block, with each split dim of global size 1 that the result widens on every rank."""
    plain = unwrap(x)
    for dim, axis in x._split:
        if x._gshape[dim] == 1 and layout[dim - len(x._gshape)][1] > 1:
            plain = share_first(plain, ctx, dim, axis)
    return plain


def _wrap_like(func: Any, ctx: SplitContext, out: Any, gshape: tuple[int, ...], split: Any) -> Any:
    if isinstance(out, tuple | list):
        return type(out)(_wrap_like(func, ctx, o, gshape, split) for o in out)
    if not isinstance(out, torch.Tensor):
        return out
    expected = ctx.local_shape(gshape, split)
    if local_shape(out) != expected:
        raise refuse(func, split, f"gave a block of shape {local_shape(out)}, expected {expected}")
    return wrap_split(out, ctx, gshape, split)


set_handler(handle)
