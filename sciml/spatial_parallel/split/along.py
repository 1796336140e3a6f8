"""Ops along one split dim, computed over the whole dim: softmax, scans, flip and roll.

- ``softmax``, ``log_softmax``, ``softmin``: the maximum (a detached shift)
  and the sum of exponentials over the dim's ranks, as ``logsumexp`` in
  :mod:`.ops`;
- ``cumsum``, ``cumprod``: a scan across ranks: each block's total (sum or
  product) is gathered from the ranks along the dim, and the block's own scan
  is offset by the totals of the blocks before it;
- ``flip``, ``roll``: the block moves to its new global place and is
  re-partitioned to the standard blocks
  (:func:`~sciml.spatial_parallel.split.redistribute.redistribute`).

Each has the single-device backward: the collectives are
:func:`~sciml.spatial_parallel.halo.collectives.replicated_sum` and
:func:`~sciml.spatial_parallel.split.crossings.split_use` (gradients summed back
over the ranks that used a value) and the redistribution's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from sciml.spatial_parallel.halo.collectives import replicated_sum
from sciml.spatial_parallel.partition import block_bounds
from sciml.spatial_parallel.split.binding import bind
from sciml.spatial_parallel.split.crossings import split_use
from sciml.spatial_parallel.split.ops import extreme
from sciml.spatial_parallel.split.redistribute import redistribute
from sciml.spatial_parallel.split.tensor import SplitContext, SplitTensor, unwrap, wrap_split

__all__ = ["ALONG_SPLIT"]


def _softmax(ctx: SplitContext, func: Any, x: SplitTensor, arguments: dict[str, Any]) -> Any:
    dim = arguments["dim"] % len(x._gshape)
    group = ctx.mesh.dim_groups[dict(x._split)[dim]]
    plain = unwrap(x)
    if arguments.get("dtype") is not None:
        plain = plain.to(arguments["dtype"])
    name = str(func.__name__)
    if name == "softmin":
        plain = -plain
    top = extreme(plain.detach(), (dim,), (group,), largest=True)
    top = torch.where(top.isfinite(), top, torch.zeros_like(top))
    shifted = plain - top
    total = split_use(replicated_sum(shifted.exp().sum(dim, keepdim=True), group), ctx, (group,))
    out = shifted - total.log() if name == "log_softmax" else shifted.exp() / total
    return wrap_split(out, ctx, x._gshape, x._split)


def _gathered(ctx: SplitContext, total: torch.Tensor, axis: int) -> torch.Tensor:
    """Every coordinate's ``total`` along mesh ``axis``, stacked in dim 0, on every rank."""
    count, coord = ctx.mesh.grid[axis], ctx.mesh.spatial_coords[axis]
    group = ctx.mesh.dim_groups[axis]
    slots = [total if c == coord else torch.zeros_like(total) for c in range(count)]
    return split_use(replicated_sum(torch.stack(slots), group), ctx, (group,))


def _scan(ctx: SplitContext, func: Any, x: SplitTensor, arguments: dict[str, Any]) -> Any:
    dim = arguments["dim"] % len(x._gshape)
    axis = dict(x._split)[dim]
    coord = ctx.mesh.spatial_coords[axis]
    plain = unwrap(x)
    if arguments.get("dtype") is not None:
        plain = plain.to(arguments["dtype"])
    product = str(func.__name__).startswith("cumprod")
    if product:
        local, total = plain.cumprod(dim), plain.prod(dim, keepdim=True)
    else:
        local, total = plain.cumsum(dim), plain.sum(dim, keepdim=True)
    # every rank reduces its slice (empty on the first: a sum of 0, a product of 1), so that
    # every rank's backward meets the gathering's collective
    before = _gathered(ctx, total, axis)[:coord]
    out = local * before.prod(0) if product else local + before.sum(0)
    return wrap_split(out, ctx, x._gshape, x._split)


def _moved(ctx: SplitContext, x: torch.Tensor, dim: int, axis: int, size: int, place: Any) -> Any:
    """``x`` (this rank's block along ``dim``) put where ``place(lo, hi)`` says, re-split."""
    bounds = block_bounds(size, ctx.mesh.grid[axis])
    pieces = tuple(tuple(place(lo, hi)) for lo, hi in bounds)
    coord = ctx.mesh.spatial_coords[axis]
    return redistribute(x, dim, pieces, size, coord=coord, group=ctx.mesh.dim_groups[axis])


def _flip(ctx: SplitContext, func: Any, x: SplitTensor, arguments: dict[str, Any]) -> Any:
    ndim = len(x._gshape)
    dims = {d % ndim for d in arguments["dims"]}
    split = dict(x._split)
    plain = unwrap(x).flip(sorted(dims))
    for dim in sorted(dims & split.keys()):
        size = x._gshape[dim]
        plain = _moved(ctx, plain, dim, split[dim], size, lambda lo, hi, n=size: [(n - hi, n - lo)])
    return wrap_split(plain, ctx, x._gshape, x._split)


def _rolled(lo: int, hi: int, shift: int, size: int) -> list[tuple[int, int]]:
    """Where ``[lo, hi)`` lands, in its own order, rolled by ``shift`` along ``size``."""
    start = (lo + shift) % size if size else 0
    end = start + hi - lo
    if end <= size:
        return [(start, end)]
    return [(start, size), (0, end - size)]


def _roll(ctx: SplitContext, func: Any, x: SplitTensor, arguments: dict[str, Any]) -> Any:
    ndim = len(x._gshape)
    shifts, dims = list(arguments["shifts"]), list(arguments["dims"])
    if len(shifts) != len(dims):  # roll over the flattened tensor: refused by the caller
        raise ValueError("roll without dims")
    split = dict(x._split)
    plain = unwrap(x)
    for shift, dim in zip(shifts, dims, strict=True):
        dim %= ndim
        if dim not in split:
            plain = plain.roll(shift, dim)
            continue
        size = x._gshape[dim]
        plain = _moved(
            ctx, plain, dim, split[dim], size, lambda lo, hi, s=shift, n=size: _rolled(lo, hi, s, n)
        )
    return wrap_split(plain, ctx, x._gshape, x._split)


_Along = Callable[[SplitContext, Any, SplitTensor, dict[str, Any]], Any]
#: Computed along a split dim, by the name of the torch function or method.
ALONG_SPLIT: dict[str, _Along] = {
    "softmax": _softmax,
    "log_softmax": _softmax,
    "softmin": _softmax,
    "cumsum": _scan,
    "cumprod": _scan,
    "flip": _flip,
    "roll": _roll,
}


def along_split(
    ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], dim: Any
) -> Any:
    """``func`` (one of :data:`ALONG_SPLIT`) along a split dim of ``args[0]``.

    ``dim`` is the dim (or dims) the caller read. The softmax family is a Python
    function around other ops (``softmin`` negates first), so its ``dim`` and
    ``dtype`` are read from the call; the others are bound by their aten schema.
    """
    name = str(func.__name__)
    if name in ("softmax", "log_softmax", "softmin"):
        arguments = {"dim": dim, "dtype": kwargs.get("dtype")}
    else:
        arguments = dict(bind(func, args, kwargs).arguments)
    return ALONG_SPLIT[name](ctx, func, args[0], arguments)
