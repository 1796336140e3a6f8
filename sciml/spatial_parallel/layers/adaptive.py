"""Adaptive average pooling of a split volume to any output size.

Torch's bins along a dim of size ``n`` pooled to ``m`` are
``[floor(i n / m), ceil((i + 1) n / m))``; a mean over a box of bins is the
mean along each dim in turn. Along an unsplit dim the block is averaged by the
bins' matrix; along a split dim each rank sums its part of every bin it
touches, the partial sums are summed over the dim's ranks (``m`` bins, small:
pooling shrinks; the collective's backward sums the gradients too), and each
rank keeps its standard block of the bins, so the result is split as the
input.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sciml.spatial_parallel.halo.collectives import all_reduce_sum
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.partition import block_bounds

__all__ = ["adaptive_avg_pool"]


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
