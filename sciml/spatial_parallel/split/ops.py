"""Reductions of split blocks, computed over the global tensor.

A reduction over every split dim is computed from the local reduction and
one collective over the spatial group, and gives a replicated tensor whose
gradient is the whole gradient on every rank (as
:class:`~sciml.spatial_parallel.layers.heads.SpatialAdaptiveAvgPool3d`'s output):
sums pass it straight through (:func:`~sciml.spatial_parallel.halo.collectives.replicated_sum`),
and the mean used inside ``var``, ``std`` and ``logsumexp`` meets the block
again through :func:`~sciml.spatial_parallel.split.crossings.split_use`. A
reduction over unsplit dims only runs on the block.

A reduction of a folded block over its merged dim (tokens merged across split
dims) runs the same computation over the merged dim's factors
(:func:`reduce_folded`).

A reduction over some split dims but not others (``keepdim=True``) runs the
same collectives over the reduced dims' mesh axes only, and stays split: each
reduced dim has global size 1, held by the first rank along its axis
(:func:`~sciml.spatial_parallel.split.crossings.own_first`), so that it
broadcasts against the full blocks as on one tensor.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from sciml.spatial_parallel.halo.collectives import replicated_sum
from sciml.spatial_parallel.split.binding import bind
from sciml.spatial_parallel.split.crossings import own_first, split_use
from sciml.spatial_parallel.split.folded import expanded
from sciml.spatial_parallel.split.op_names import refuse, split_names
from sciml.spatial_parallel.split.tensor import (
    FoldedTensor,
    Groups,
    SplitContext,
    SplitTensor,
    tensors_in,
    unwrap,
    wrap_replicated,
    wrap_split,
)

#: Names of the torch functions and methods computed over split dims.
REDUCTIONS = frozenset(
    {
        "sum",
        "nansum",
        "mean",
        "amax",
        "amin",
        "logsumexp",
        "norm",
        "vector_norm",
        "linalg_vector_norm",
        "max",
        "min",
        "any",
        "all",
        "var",
        "std",
        "var_mean",
        "std_mean",
    }
)
#: The aten ops those calls reach (``norm`` reaches ``linalg_vector_norm``).
_COMPUTED = frozenset(REDUCTIONS - {"norm", "vector_norm"})
_VARIANCE = ("var", "std", "var_mean", "std_mean")


def _arguments(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The aten op a reduction reaches and its arguments by name, as torch binds them.

    ``correction`` is filled in (torch's default 1) and a norm's order is ``p``.
    """
    bound = bind(func, args, kwargs)
    if bound.name not in _COMPUTED:
        split = next(t for t in tensors_in((*args, *kwargs.values())) if isinstance(t, SplitTensor))
        raise refuse(func, split._split, f"it reaches aten.{bound.op} here, which is not computed")
    values = dict(bound.arguments)
    if bound.name in _VARIANCE and values.get("correction") is None:
        values["correction"] = 1
    if "ord" in values:
        values["p"] = values.pop("ord")
    return bound.name, values


def _dims(dim: Any, ndim: int) -> tuple[int, ...]:
    if dim is None or (isinstance(dim, tuple | list) and len(dim) == 0):
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(sorted({d % ndim for d in dims}))


def _reduced_shape(shape: tuple[int, ...], dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if d in dims else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in dims)


def _squeeze(x: torch.Tensor, dims: tuple[int, ...], keepdim: bool) -> torch.Tensor:
    return x if keepdim else x.squeeze(dims) if dims else x


def reduce(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A reduction of a split block: global over split dims, local over the others."""
    name, values = _arguments(func, args, kwargs)
    x = values["input"]
    if not isinstance(x, SplitTensor):
        raise refuse(func, (), "reduces a tensor by a split block's values; not supported")
    ndim = len(x._gshape)
    dims = _dims(values.get("dim"), ndim)
    keepdim = bool(values.get("keepdim", False))
    split_dims = {d for d, _ in x._split}
    crossed = split_dims & set(dims)
    if not crossed:
        return _local(ctx, func, args, kwargs, x, dims, keepdim)
    partial = crossed != split_dims
    if partial and not keepdim:
        raise refuse(
            func,
            x._split,
            f"it reduces over split dims {sorted(crossed)} but not over "
            f"{sorted(split_dims - crossed)} and drops the reduced dims, which leaves no dim "
            f"to split the result along; pass keepdim=True (the result stays split) or "
            f"reduce over all of {split_names(x._split)}",
        )
    axes = tuple(a for d, a in x._split if d in crossed)
    plain = unwrap(x)
    count = math.prod(x._gshape[d] for d in dims)
    values |= {"split": x._split, "gshape": x._gshape}
    out = _global(ctx, func, name, plain, values, dims, count, ctx.groups(axes))
    outs = out if isinstance(out, tuple) else (out,)
    if partial:
        kept = _reduced_shape(x._gshape, dims, True)
        owned = (own_first(o, ctx, sorted(crossed), axes) for o in outs)
        items = tuple(wrap_split(o, ctx, kept, x._split) for o in owned)
    else:
        items = tuple(wrap_replicated(_squeeze(o, dims, keepdim), ctx) for o in outs)
    if not isinstance(out, tuple):
        return items[0]
    return getattr(torch.return_types, name)(items) if name in ("max", "min") else items


def reduce_folded(x: FoldedTensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A reduction of a folded block over its merged dim (and others): replicated.

    Computed over the merged dim's factors as over split dims; ``NotImplemented`` for
    a reduction that keeps the merged dim, and for ``max``/``min`` along one dim (its
    indices are along that dim, not along the factors).
    """
    bound = bind(func, args, kwargs)
    if bound.name not in _COMPUTED or bound.arguments["input"] is not x:
        return NotImplemented
    name, values = _arguments(func, args, kwargs)
    ndim, nf = len(x._gshape), len(x._factors)
    dims = _dims(values.get("dim"), ndim)
    if x._dim not in dims or (name in ("max", "min") and values.get("dim") is not None):
        return NotImplemented
    keepdim = bool(values.get("keepdim", False))
    gexp, esplit = expanded(x)
    edims = tuple(
        e
        for d in dims
        for e in (range(d, d + nf) if d == x._dim else [d + (nf - 1) * (d > x._dim)])
    )
    ctx = x._ctx
    block = unwrap(x).reshape(ctx.local_shape(gexp, esplit))
    values |= {"split": esplit, "gshape": gexp}
    count = math.prod(gexp[d] for d in edims)
    groups = ctx.groups([axis for _, axis in esplit])
    out = _global(ctx, func, name, block, values, edims, count, groups)
    kept = _reduced_shape(x._gshape, dims, True)
    outs = out if isinstance(out, tuple) else (out,)
    items = tuple(wrap_replicated(_squeeze(o.reshape(kept), dims, keepdim), ctx) for o in outs)
    if not isinstance(out, tuple):
        return items[0]
    return getattr(torch.return_types, name)(items) if name in ("max", "min") else items


def _local(
    ctx: SplitContext,
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    x: SplitTensor,
    dims: tuple[int, ...],
    keepdim: bool,
) -> Any:
    """A reduction over unsplit dims only: on the block, split dims renumbered."""
    out = func(unwrap(x), *args[1:], **kwargs)
    gshape = _reduced_shape(x._gshape, dims, keepdim)
    split = tuple((d if keepdim else d - sum(r < d for r in dims), a) for d, a in x._split)
    if isinstance(out, tuple):
        return type(out)(wrap_split(o, ctx, gshape, split) for o in out)
    return wrap_split(out, ctx, gshape, split)


def _sum(x: torch.Tensor, dims: tuple[int, ...], groups: Groups, **options: Any) -> torch.Tensor:
    """The sum over ``dims`` (kept) and over ``groups``, replicated over them."""
    return _replicated_total(x.sum(dims, keepdim=True, **options), groups)


def _replicated_total(x: torch.Tensor, groups: Groups) -> torch.Tensor:
    for group in groups:
        x = replicated_sum(x, group)
    return x


def _all_reduce(x: torch.Tensor, op: Any, groups: Groups) -> None:
    for group in groups:
        dist.all_reduce(x, op=op, group=group)


def _global(
    ctx: SplitContext,
    func: Any,
    name: str,
    x: torch.Tensor,
    values: dict[str, Any],
    dims: tuple[int, ...],
    count: int,
    groups: Groups,
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The reduction over ``dims`` (kept) and over ``groups``, the ranks along its split dims."""
    if name == "sum":
        return _sum(x, dims, groups, dtype=values["dtype"])
    if name == "nansum":
        return _replicated_total(x.nansum(dims, keepdim=True, dtype=values["dtype"]), groups)
    if name == "mean":
        return _sum(x, dims, groups, dtype=values["dtype"]) / count
    if name in ("amax", "amin"):
        return extreme(x, dims, groups, largest=name == "amax")
    if name in ("any", "all"):
        return _truth(x, dims, groups, any_=name == "any")
    if name in ("max", "min"):
        if values.get("dim") is None:
            return extreme(x, dims, groups, largest=name == "max")
        ((dim, axis),) = [(d, a) for d, a in values["split"] if d in dims]
        lo = ctx.bounds(values["gshape"][dim], axis)[0]
        return arg_extreme(x, dim, lo, groups, largest=name == "max")
    if name in _VARIANCE:
        mean = _sum(x, dims, groups) / count
        centred = x - split_use(mean, ctx, groups)
        var = _sum(centred * centred.conj(), dims, groups) / max(count - values["correction"], 0)
        out = var.sqrt() if name.startswith("std") else var
        return (out, mean) if name.endswith("_mean") else out
    if name == "logsumexp":
        top = extreme(x.detach(), dims, groups, largest=True)
        top = torch.where(top.isfinite(), top, torch.zeros_like(top))
        return _sum((x - top).exp(), dims, groups).log() + top
    return _norm(func, x, values, dims, groups)


def _norm(
    func: Any, x: torch.Tensor, values: dict[str, Any], dims: tuple[int, ...], groups: Groups
) -> torch.Tensor:
    p, dtype = values["p"], values.get("dtype")
    if dtype is not None:
        x = x.to(dtype)
    size = x.abs()
    if p in ("fro", None) or p == 2:
        return _sum(size * size, dims, groups).sqrt()
    if p == math.inf:
        return extreme(size, dims, groups, largest=True)
    if p == -math.inf:
        return extreme(size, dims, groups, largest=False)
    if p == 0:
        return _sum((x != 0).to(size.dtype), dims, groups)
    if isinstance(p, int | float) and not isinstance(p, bool):
        return _sum(size**p, dims, groups) ** (1.0 / p)
    raise refuse(func, (), f"norm p={p!r} over split dims is not supported")


class _Pick(torch.autograd.Function):
    """A replicated value picked from the block; the backward sends its gradient by weights."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, value: torch.Tensor, weights: torch.Tensor) -> Any:
        ctx.save_for_backward(weights)
        return value.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (weights,) = ctx.saved_tensors
        return grad * weights, None, None


def _lowest(x: torch.Tensor, largest: bool) -> float | int:
    """The value no element can exceed (``largest``) or fall below."""
    if x.dtype.is_floating_point:
        return -math.inf if largest else math.inf
    info = torch.iinfo(x.dtype)
    return info.min if largest else info.max


def _truth(x: torch.Tensor, dims: tuple[int, ...], groups: Groups, *, any_: bool) -> Any:
    """Global ``any``/``all`` over ``dims`` (kept): the largest or smallest truth value."""
    shape = _reduced_shape(tuple(x.shape), dims, True)
    truth = (x != 0).to(torch.uint8)
    if truth.numel():
        value = (truth.amax if any_ else truth.amin)(dims, keepdim=True)
    else:  # an empty block: what neither changes any nor all
        value = truth.new_full(shape, 0 if any_ else 1)
    _all_reduce(value, dist.ReduceOp.MAX if any_ else dist.ReduceOp.MIN, groups)
    return value.to(torch.bool)


def extreme(x: torch.Tensor, dims: tuple[int, ...], groups: Groups, *, largest: bool) -> Any:
    """``amax``/``amin`` over ``dims`` (kept) and ``groups``; ties share the gradient as torch's."""
    shape = _reduced_shape(tuple(x.shape), dims, True)
    if x.numel():
        local = (x.amax if largest else x.amin)(dims, keepdim=True).detach()
    else:
        local = x.new_full(shape, _lowest(x, largest))
    value = local.clone()
    _all_reduce(value, dist.ReduceOp.MAX if largest else dist.ReduceOp.MIN, groups)
    mask = (x.detach() == value).to(x.dtype if x.dtype.is_floating_point else torch.float32)
    count = mask.sum(dims, keepdim=True)
    _all_reduce(count, dist.ReduceOp.SUM, groups)
    return _Pick.apply(x, value, mask / count)


def arg_extreme(
    x: torch.Tensor, dim: int, lo: int, groups: Groups, *, largest: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``max``/``min`` along the split ``dim`` (kept) over ``groups``: values and global indices.

    ``lo`` is the block's first global index along ``dim``. On ties the lowest
    global index wins (as torch's CPU kernel); it takes the gradient.
    """
    size = x.shape[dim]
    if size:
        local, index = (x.max if largest else x.min)(dim, keepdim=True)
        local, index = local.detach(), index + lo
    else:
        shape = _reduced_shape(tuple(x.shape), (dim,), True)
        local = x.new_full(shape, _lowest(x, largest))
        index = torch.zeros(shape, dtype=torch.int64, device=x.device)
    value = local.clone()
    _all_reduce(value, dist.ReduceOp.MAX if largest else dist.ReduceOp.MIN, groups)
    sentinel = torch.iinfo(torch.int64).max
    index = torch.where(local == value, index, torch.full_like(index, sentinel))
    _all_reduce(index, dist.ReduceOp.MIN, groups)
    positions = torch.arange(lo, lo + size, device=x.device)
    positions = positions.reshape([-1 if d == dim else 1 for d in range(x.dim())])
    weights = (positions == index).to(x.dtype)
    return _Pick.apply(x, value, weights), index
