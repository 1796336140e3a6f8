"""Torch ops on folded blocks: kept on the blocks where that is exact (see :mod:`.folded`).

:func:`on_blocks` computes pointwise ops (whole operands take their block of the
merged dim), ops along the other dims (``softmax``, ``layer_norm``, ``linear``,
reductions, ``chunk``), permutes, reshapes, indexing with integers and slices,
``cat``/``stack`` along other dims, and ``einsum``/``matmul``/``bmm`` that keep the
merged dim (window attention; the keys and values of global attention are gathered).
It answers ``NotImplemented`` for every other op, which then runs on the blocks
gathered whole, and refuses what cannot be gathered: random draws, and writes into
a folded block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from sciml.spatial_parallel.replicated import is_replicated
from sciml.spatial_parallel.split.binding import bind
from sciml.spatial_parallel.split.contract import CONTRACTIONS, contraction_of
from sciml.spatial_parallel.split.crossings import split_use
from sciml.spatial_parallel.split.folded import (
    expanded,
    fold_block,
    fold_reshape,
    merged_split,
    rewrap,
    signature,
    whole,
)
from sciml.spatial_parallel.split.op_names import (
    DROPOUT,
    PASSTHROUGH,
    RANDOM,
    SAME_LAYOUT,
    aten_name,
    dropout_draws,
    refuse,
    writes_in_place,
)
from sciml.spatial_parallel.split.ops import REDUCTIONS, reduce_folded
from sciml.spatial_parallel.split.redistribute import gather_whole
from sciml.spatial_parallel.split.tensor import (
    FoldedTensor,
    SplitContext,
    SplitTensor,
    global_result,
    map_tensors,
    new_arguments,
    tensors_in,
    unwrap,
    wrap_replicated,
)

__all__ = ["on_blocks"]


def _plain_args(args: Sequence[Any], ctx: SplitContext) -> tuple[Any, ...]:
    """Blocks unwrapped; replicated tensors entering the blocks' computation (summed gradients)."""

    def plain(t: torch.Tensor) -> torch.Tensor:
        return split_use(t, ctx) if is_replicated(t) else unwrap(t)

    return map_tensors(tuple(args), plain)


def _dims(value: Any, ndim: int) -> set[int] | None:
    """The dims an op's ``dim`` argument names (None: every dim)."""
    if value is None:
        return None
    return {d % ndim for d in ([value] if isinstance(value, int) else value)}


def _tensor_operands(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    return tensors_in(args) + tensors_in(tuple(kwargs.values()))


def _pointwise(x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Elementwise: folded partners alike; whole tensors take their block; others broadcast."""
    ctx = x._ctx
    every = _tensor_operands(args, kwargs)
    shapes = [t._gshape if isinstance(t, FoldedTensor) else tuple(t.shape) for t in every]
    ndim = max(len(s) for s in shapes)
    at = x._dim - len(x._gshape)  # the merged dim, from the end
    size = x._gshape[x._dim]
    blocked: set[int] = set()  # whole operands along the merged dim: their block
    for t, shape in zip(every, shapes, strict=True):
        if isinstance(t, SplitTensor):
            return NotImplemented
        if isinstance(t, FoldedTensor):
            if signature(t) != signature(x) or t._dim - len(shape) != at:
                return NotImplemented
            continue
        here = shape[at] if len(shape) >= -at else 1
        if here == size and size != 1:
            blocked.add(id(t))
        elif here != 1:
            return NotImplemented  # torch's own error, from the gathered tensors

    def plain(t: torch.Tensor) -> torch.Tensor:
        if id(t) in blocked:
            return fold_block(t, x, t.dim() + at)
        if isinstance(t, FoldedTensor):
            written = args and t is args[0] and writes_in_place(func, kwargs)
            return t._block if written else unwrap(t)
        return split_use(t, ctx) if is_replicated(t) else t

    values = map_tensors(tuple(kwargs.values()), plain)
    out = func(*map_tensors(args, plain), **dict(zip(kwargs, values, strict=True)))
    glob = torch.empty(torch.broadcast_shapes(*shapes), device="meta")
    return rewrap(out, x, glob, ndim + at)


def _along(x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An op along dims other than the merged one (softmax, a reduction, a split)."""
    if any(isinstance(t, SplitTensor) for t in _tensor_operands(args, kwargs)):
        return NotImplemented
    if any(isinstance(t, FoldedTensor) and t is not x for t in _tensor_operands(args, kwargs)):
        return NotImplemented
    ndim = len(x._gshape)
    arguments = bind(func, args, kwargs).arguments
    name = aten_name(func)
    dims: set[int] | None
    if name == "layer_norm":
        dims = set(range(ndim - len(arguments["normalized_shape"]), ndim))
    elif name == "linear":
        dims = {ndim - 1}
    else:
        dims = _dims(arguments.get("dim"), ndim)
    if not dims or x._dim in dims:  # None or []: every dim, as torch reads them
        return NotImplemented
    glob = global_result(func, args, kwargs)
    values = _plain_args(tuple(kwargs.values()), x._ctx)
    out = func(*_plain_args(args, x._ctx), **dict(zip(kwargs, values, strict=True)))
    first = glob[0] if isinstance(glob, tuple | list) else glob
    removed = dims if first.dim() == ndim - len(dims) else set()
    return rewrap(out, x, glob, x._dim - sum(1 for d in removed if d < x._dim))


def _permuted(x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    probe = torch.empty([2 + d for d in range(len(x._gshape))], device="meta")
    order = [s - 2 for s in global_result(func, (probe, *args[1:]), kwargs).shape]
    glob = global_result(func, args, kwargs)
    return rewrap(func(unwrap(x), *args[1:], **kwargs), x, glob, order.index(x._dim))


def _reshaped(x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if any(isinstance(t, SplitTensor | FoldedTensor) for t in tensors_in(args[1:])):
        return NotImplemented
    gout = tuple(global_result(func, args, kwargs).shape)
    shape, split = expanded(x)
    block = unwrap(x).reshape(x._ctx.local_shape(shape, split))
    out = fold_reshape(x._ctx, block, shape, split, gout)
    return NotImplemented if out is None else out


def _indexed(x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``x[...]`` with integers, slices, ``None`` and ``...``; the merged dim taken whole."""
    index = args[1]
    items = list(index) if isinstance(index, tuple) else [index]
    if any(
        not isinstance(i, int | slice | type(None) | type(Ellipsis)) or isinstance(i, bool)
        for i in items
    ):
        return NotImplemented
    ndim = len(x._gshape)
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (ndim - used)
    dim, place = 0, None  # input dim reached; the merged dim's place in the output
    kept = 0
    for item in items:
        if item is None:
            kept += 1
            continue
        if dim == x._dim:
            size = x._gshape[dim]
            if not isinstance(item, slice) or item.indices(size) != (0, size, 1):
                return NotImplemented
            place = kept
        kept += isinstance(item, slice)
        dim += 1
    if place is None:  # the merged dim after the indexed ones
        place = kept + x._dim - dim
    glob = global_result(func, args, kwargs)
    return rewrap(unwrap(x)[index], x, glob, place)


def _joined(x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``cat``/``stack`` of blocks folded alike, along another dim."""
    arguments = bind(func, args, kwargs).arguments
    tensors = list(args[0] if args else kwargs["tensors"])  # bind's holds stand-ins
    if not all(
        isinstance(t, FoldedTensor) and signature(t) == signature(x) and t._dim == x._dim
        for t in tensors
    ):
        return NotImplemented
    ndim = len(x._gshape) + (aten_name(func) == "stack")
    dim = arguments["dim"] % ndim
    if dim == x._dim and aten_name(func) != "stack":
        return NotImplemented
    glob = global_result(func, args, kwargs)
    out = func([unwrap(t) for t in tensors], dim)
    return rewrap(out, x, glob, x._dim + (aten_name(func) == "stack" and dim <= x._dim))


def _contracted(x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A contraction keeping the merged dim of ``x`` (window attention, a query's rows)."""
    call = contraction_of(func, args, kwargs)
    if call is None or not any(o is x for o in call.operands):
        return NotImplemented
    fn, operands, terms, output = call
    letter = terms[next(i for i, o in enumerate(operands) if o is x)][x._dim]
    if letter not in output or any(len(set(t)) != len(t) for t in (*terms, output)):
        return NotImplemented
    ctx = x._ctx
    prepared = []
    for term, operand in zip(terms, operands, strict=True):
        place = term.find(letter)
        alike = isinstance(operand, FoldedTensor) and place == operand._dim
        if alike and signature(operand) == signature(x):
            prepared.append(unwrap(operand))
            continue
        if isinstance(operand, FoldedTensor):
            operand = whole(operand)
        elif isinstance(operand, SplitTensor):
            operand = wrap_replicated(
                gather_whole(ctx, unwrap(operand), operand._split, operand._gshape), ctx
            )
        if place >= 0 and operand.shape[place] != 1:
            prepared.append(fold_block(operand, x, place))
        else:
            prepared.append(split_use(operand, ctx) if is_replicated(operand) else operand)
    glob = global_result(fn, operands, {})
    return rewrap(fn(*prepared), x, glob, output.index(letter))


_METADATA = ("shape", "size", "numel", "nelement", "len")
_PERMUTES = ("permute", "transpose", "movedim", "moveaxis", "swapaxes", "swapdims")
_RESHAPES = (
    *("view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze"),
    *("view_as", "reshape_as", "ravel"),
)
_ALONG = (
    *("softmax", "log_softmax", "softmin", "layer_norm", "linear", "normalize"),
    *("sum", "mean", "amax", "amin", "var", "std", "logsumexp", "prod", "all", "any"),
    *("nansum", "norm", "vector_norm", "linalg_vector_norm", "var_mean", "std_mean"),
    *("max", "min", "argmax", "argmin", "sort", "argsort", "topk", "cummax", "cummin"),
    *("narrow", "split", "chunk", "unbind", "select", "cumsum", "cumprod"),
)


def _new(x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``x.new_zeros(x.shape)``: a folded block of the new tensor; any other size: plain."""
    size, rest, kwargs = new_arguments(args, kwargs)
    if size != x._gshape:
        return func(unwrap(x), size, *rest, **kwargs)
    local = unwrap(x).shape
    return rewrap(
        func(unwrap(x), local, *rest, **kwargs), x, torch.empty(size, device="meta"), x._dim
    )


def _metadata(x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    name = aten_name(func)
    shape = torch.Size(x._gshape)
    if name == "shape":
        return shape
    if name == "size":
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        return shape if dim is None else shape[dim]
    return shape[0] if name == "len" else math.prod(shape)


def on_blocks(
    x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, pointwise: bool
) -> Any:
    """``func`` on folded blocks, kept folded where that is exact; else ``NotImplemented``.

    Args:
        x: The first folded block among the arguments.
        func: The torch function.
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        pointwise: Whether ``func`` is elementwise (:mod:`.dispatch` classifies it).

    Raises:
        SplitOpError: For a random op or active dropout (each rank would draw its own
            values), and for an op writing into a folded block that it cannot keep
            (a gathered copy would take the write).
    """
    name = aten_name(func)
    if name in RANDOM or (name in DROPOUT and dropout_draws(args, kwargs)):
        raise refuse(
            func,
            merged_split(x),
            "each rank would draw its own random values, not its block of the global draw; "
            "use the nn.Dropout module (parallelize draws its global mask) or draw the "
            "global tensor",
        )
    out = _kept(x, func, args, kwargs, name, pointwise)
    written = args[0] if args else None
    if out is NotImplemented and (
        kwargs.get("out") is not None
        or isinstance(written, FoldedTensor)
        and (writes_in_place(func, kwargs) or name == "setitem")
    ):
        raise refuse(
            func,
            merged_split(x),
            "it writes into a block of windows or tokens merged across split dims, and it is "
            "not computed on such blocks; write its result into a new tensor",
        )
    return out


def _kept(
    x: FoldedTensor,
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    name: str,
    pointwise: bool,
) -> Any:
    """``func`` on the folded blocks by its kind, or NotImplemented."""
    if name in _METADATA and args and args[0] is x:
        return _metadata(x, func, args, kwargs)
    if name in ("new_zeros", "new_ones", "new_empty", "new_full") and args and args[0] is x:
        return _new(x, func, args, kwargs)
    if name in PASSTHROUGH:
        return func(*args, **kwargs)
    if name in DROPOUT and args and args[0] is x:
        return x  # inactive (see on_blocks)
    if name in SAME_LAYOUT and args and args[0] is x:
        out = func(*map_tensors(args, unwrap), **kwargs)
        if out is x or not isinstance(out, torch.Tensor):
            return out
        return rewrap(out, x, torch.empty(x._gshape, device="meta"), x._dim)
    if pointwise:
        return _pointwise(x, func, args, kwargs)
    if args and args[0] is x:
        if name in _PERMUTES:
            return _permuted(x, func, args, kwargs)
        if name in _RESHAPES:
            return _reshaped(x, func, args, kwargs)
        if name == "getitem":
            return _indexed(x, func, args, kwargs)
        if name in _ALONG:
            out = _along(x, func, args, kwargs)
            if out is NotImplemented and name in REDUCTIONS:  # over the merged dim too
                return reduce_folded(x, func, args, kwargs)
            return out
    if name in CONTRACTIONS:
        return _contracted(x, func, args, kwargs)
    if name in ("cat", "concat", "concatenate", "stack"):
        return _joined(x, func, args, kwargs)
    return NotImplemented
