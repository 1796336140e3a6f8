"""Adaptive average and max pooling of a split volume to any output size.

Torch's bins along a dim of size ``n`` pooled to ``m`` are
``[floor(i n / m), ceil((i + 1) n / m))``; a mean over a box of bins is the
mean along each dim in turn. Along an unsplit dim the block is averaged by the
bins' matrix; along a split dim each rank sums its part of every bin it
touches, the partial sums are summed over the dim's ranks (``m`` bins, small:
pooling shrinks; the collective's backward sums the gradients too), and each
rank keeps its standard block of the bins, so the result is split as the
input. Max pooling agrees each bin's maximum over the ranks instead
(:func:`adaptive_max_pool`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist

from sciml.spatial_parallel.halo.collectives import all_reduce_sum, replicated_sum
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.partition import block_bounds

__all__ = ["adaptive_avg_pool", "adaptive_max_pool"]


def _bins(size: int, out: int, lo: int, hi: int, like: torch.Tensor) -> torch.Tensor:
    """``(out, hi - lo)``: each bin's weights (1 / its length) on positions ``lo..hi``."""
    weights = torch.zeros(out, hi - lo, dtype=like.dtype, device=like.device)
    for i in range(out):
        start, end = (i * size) // out, -(-(i + 1) * size // out)
        a, b = max(start, lo), min(end, hi)
        if a < b:
            weights[i, a - lo : b - lo] = 1.0 / (end - start)
    return weights


def _average(y: torch.Tensor, dim: int, weights: torch.Tensor) -> torch.Tensor:
    return torch.movedim(torch.tensordot(y, weights, ([dim], [1])), -1, dim)


def adaptive_avg_pool(
    mesh: SpatialMesh, x: torch.Tensor, size: Sequence[int], output: Sequence[int]
) -> torch.Tensor:
    """This rank's block of ``adaptive_avg_pool3d`` of a volume split over ``mesh``.

    Args:
        mesh: The process grid; ``x`` is split along D, H, W by its spatial axes.
        x: This rank's ``(N, C, d, h, w)`` block.
        size: The global ``(D, H, W)``.
        output: The global output ``(D, H, W)``, split as the input.
    """
    y = x
    for axis, (n, m) in enumerate(zip(size, output, strict=True)):
        dim, parts = axis + 2, mesh.grid[axis]
        if parts == 1:
            y = _average(y, dim, _bins(n, m, 0, n, y))
            continue
        coord = mesh.spatial_coords[axis]
        lo, hi = block_bounds(n, parts)[coord]
        whole = all_reduce_sum(
            _average(y, dim, _bins(n, m, lo, hi, y)).contiguous(), mesh.dim_groups[axis]
        )
        a, b = block_bounds(m, parts)[coord]
        y = whole.narrow(dim, a, b - a)
    return y


def _partial_max(
    y: torch.Tensor, dim: int, size: int, out: int, lo: int, hi: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each bin's maximum over positions ``lo..hi`` of ``dim``, and its global index.

    The index is the first occurrence (torch's choice among ties); a bin with no
    position here gives ``-inf`` at index ``size`` (after every real one).
    """
    values, index = [], []
    empty = list(y.shape)
    empty[dim] = 1
    for i in range(out):
        start, end = (i * size) // out, -(-(i + 1) * size // out)
        a, b = max(start, lo), min(end, hi)
        if a < b:
            value, at = y.narrow(dim, a - lo, b - a).max(dim, keepdim=True)
            values.append(value)
            index.append(at + a)
        else:
            values.append(y.new_full(empty, -math.inf))
            index.append(torch.full(empty, size, dtype=torch.long, device=y.device))
    return torch.cat(values, dim), torch.cat(index, dim)


def adaptive_max_pool(
    mesh: SpatialMesh,
    x: torch.Tensor,
    size: Sequence[int],
    output: Sequence[int],
    *,
    replicated: bool = False,
) -> torch.Tensor:
    """This rank's block of ``adaptive_max_pool3d`` of a volume split over ``mesh``.

    A maximum over a box of bins is the maximum along each dim in turn; taken along
    W, then H, then D, the first maximum along each is the box's first in row-major
    order, the element torch's kernel picks among ties (and its gradient's only
    target). Along a split dim each rank takes its part of every bin it touches,
    the maximum and the lowest index holding it are agreed over the dim's ranks
    (two small all-reduces), and only the rank holding that element passes it on
    (a sum over the ranks, whose backward sums the gradients as for the average).

    Args:
        mesh: The process grid; ``x`` is split along D, H, W by its spatial axes.
        x: This rank's ``(N, C, d, h, w)`` block.
        size: The global ``(D, H, W)``.
        output: The global output ``(D, H, W)``, split as the input.
        replicated: Keep every rank's whole output (global pooling to one value per
            channel, replicated as for the average) instead of its block.
    """
    y = x
    for axis in reversed(range(3)):
        n, m, dim, parts = size[axis], output[axis], axis + 2, mesh.grid[axis]
        if parts == 1:
            y = _partial_max(y, dim, n, m, 0, n)[0]
            continue
        coord, group = mesh.spatial_coords[axis], mesh.dim_groups[axis]
        lo, hi = block_bounds(n, parts)[coord]
        values, index = _partial_max(y, dim, n, m, lo, hi)
        agreed = torch.stack([values.detach(), values.detach().isnan().to(values.dtype)])
        dist.all_reduce(agreed, dist.ReduceOp.MAX, group=group)  # the maximum; any NaN
        first = torch.where(values.detach() == agreed[0], index, n)
        dist.all_reduce(first, dist.ReduceOp.MIN, group=group)
        mine = torch.where(index == first, values, torch.zeros_like(values)).contiguous()
        nan = agreed[1] > 0
        if not replicated:
            a, b = block_bounds(m, parts)[coord]
            y = all_reduce_sum(mine, group).narrow(dim, a, b - a)
            nan = nan.narrow(dim, a, b - a)
        else:
            y = replicated_sum(mine, group)
        y = torch.where(nan, torch.full_like(y, math.nan), y)  # NaN propagates, as in torch
    return y
