"""Re-partition a split dim: from any contiguous pieces per rank to the standard blocks.

A pad, concatenation, slice or ``interpolate`` along a split dim leaves each
rank holding pieces of the new global tensor that are not its
:func:`torch.tensor_split` block. Every rank knows every rank's pieces from the
global shapes alone; one all-gather over the ranks along that mesh axis moves
them, and the backward routes each gradient element back to the rank that
held it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from sciml.spatial_parallel.halo.first_order import first_order_only
from sciml.spatial_parallel.partition import block_bounds

if TYPE_CHECKING:
    from sciml.spatial_parallel.split.tensor import SplitContext

#: Each coordinate's pieces along the dim: ``[lo, hi)`` in the new global index.
Pieces = tuple[tuple[tuple[int, int], ...], ...]


def _gather(
    x: torch.Tensor, dim: int, longest: int, group: dist.ProcessGroup
) -> list[torch.Tensor]:
    """Every rank's ``x`` along ``dim``, each padded to ``longest``."""
    pad = list(x.shape)
    pad[dim] = longest - x.shape[dim]
    buffer = torch.cat([x, x.new_zeros(pad)], dim).contiguous()
    out = [torch.empty_like(buffer) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, buffer, group=group)
    return out


def _assemble(
    parts: list[torch.Tensor],
    dim: int,
    sources: tuple[tuple[tuple[int, int], ...], ...],
    want: tuple[int, int],
    like: torch.Tensor,
) -> torch.Tensor:
    """``want``'s range of the global dim from every coordinate's gathered ``sources`` ranges."""
    found = []
    for part, ranges in zip(parts, sources, strict=True):
        offset = 0
        for lo, hi in ranges:
            a, b = max(lo, want[0]), min(hi, want[1])
            if a < b:
                found.append((a, part.narrow(dim, offset + a - lo, b - a)))
            offset += hi - lo
    if not found:
        shape = list(like.shape)
        shape[dim] = 0
        return like.new_zeros(shape)
    return torch.cat([piece for _, piece in sorted(found, key=lambda p: p[0])], dim)


class _Redistribute(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, dim: int, pieces: Pieces, size: int, coord: int, group: Any
    ) -> torch.Tensor:
        targets = tuple((b,) for b in block_bounds(size, len(pieces)))
        ctx.dim, ctx.pieces, ctx.targets, ctx.coord, ctx.group = dim, pieces, targets, coord, group
        longest = max(sum(hi - lo for lo, hi in p) for p in pieces)
        parts = _gather(x, dim, longest, group)
        return _assemble(parts, dim, pieces, targets[coord][0], x)

    @staticmethod
    @first_order_only("a re-partition of a split block")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        longest = max(hi - lo for ((lo, hi),) in ctx.targets)
        parts = _gather(grad.contiguous(), ctx.dim, longest, ctx.group)
        mine = [
            _assemble(parts, ctx.dim, ctx.targets, piece, grad) for piece in ctx.pieces[ctx.coord]
        ]
        if not mine:
            shape = list(grad.shape)
            shape[ctx.dim] = 0
            return grad.new_zeros(shape), None, None, None, None, None
        return torch.cat(mine, ctx.dim), None, None, None, None, None


def redistribute(
    x: torch.Tensor,
    dim: int,
    pieces: Pieces,
    size: int,
    *,
    coord: int,
    group: dist.ProcessGroup,
) -> torch.Tensor:
    """This rank's standard block along ``dim`` of a global size ``size``.

    Args:
        x: This rank's pieces, concatenated along ``dim`` in the order of ``pieces[coord]``.
        dim: The split tensor dim.
        pieces: For each coordinate along the mesh axis, its pieces' global ranges;
            together they cover ``[0, size)`` once.
        size: The global size along ``dim``.
        coord: This rank's coordinate along the mesh axis.
        group: The ranks along that mesh axis, in coordinate order.
    """
    if all(
        p == ((lo, hi),)
        for p, (lo, hi) in zip(pieces, block_bounds(size, len(pieces)), strict=True)
    ):
        return x  # already the standard blocks
    return _Redistribute.apply(x, dim, pieces, size, coord, group)


def redistribute_along(
    ctx: SplitContext, x: torch.Tensor, dim: int, axis: int, pieces: Any, size: int
) -> Any:
    """Re-partition ``x`` (this rank's pieces along ``dim``, split along mesh ``axis``)."""
    coord = ctx.mesh.spatial_coords[axis]
    return redistribute(x, dim, pieces, size, coord=coord, group=ctx.mesh.dim_groups[axis])


class _GatherWhole(torch.autograd.Function):
    """Every rank's block joined along the split dims; the backward keeps this rank's block."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layout: tuple[tuple[int, int, Any, int], ...]) -> Any:
        ctx.blocks = []
        for dim, size, group, coord in layout:
            bounds = block_bounds(size, dist.get_world_size(group))
            longest = max(hi - lo for lo, hi in bounds)
            parts = _gather(x, dim, longest, group)
            x = torch.cat(
                [p.narrow(dim, 0, hi - lo) for p, (lo, hi) in zip(parts, bounds, strict=True)], dim
            )
            ctx.blocks.append((dim, *bounds[coord]))
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        for dim, lo, hi in ctx.blocks:  # the whole gradient on every rank: no collective
            grad = grad.narrow(dim, lo, hi - lo)
        return grad.contiguous(), None


def gather_whole(ctx: SplitContext, x: torch.Tensor, split: Any, shape: tuple[int, ...]) -> Any:
    """The global tensor of which ``x`` is this rank's block (split as ``split``), on every rank.

    The result is replicated over the ranks of the split axes: its gradient is the
    whole gradient on each of them, of which the backward keeps this rank's block.
    """
    layout = tuple(
        (dim, shape[dim], ctx.mesh.dim_groups[axis], ctx.mesh.spatial_coords[axis])
        for dim, axis in split
    )
    for record in _RECORDS:
        record.append(math.prod(shape))
    return _GatherWhole.apply(x, layout)


_RECORDS: list[list[int]] = []


@contextmanager
def recorded_gathers() -> Iterator[list[int]]:
    """The element counts of the tensors :func:`gather_whole` gathers within the block.

    What a split model holds whole on every rank (a transformer's keys and values),
    for memory audits and tests.
    """
    record: list[int] = []
    _RECORDS.append(record)
    try:
        yield record
    finally:
        _RECORDS.remove(record)
