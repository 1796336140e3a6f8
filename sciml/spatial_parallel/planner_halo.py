"""Where a grid puts each layer: the largest block and the widest halo, from the partition maths.

Every tensor is split like :func:`torch.tensor_split`
(:func:`~sciml.spatial_parallel.partition.block_bounds`: the first ranks along
a dim hold the extra element, so rank 0's block is the largest). For each
layer with a window (convolution, pooling, transposed convolution)
:func:`layer_halo` asks :mod:`~sciml.spatial_parallel.partition` for every
rank's pieces along each split dim and keeps the widest halo any rank
receives; a block too small for its halo makes the grid unusable
(:class:`GridError`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from sciml.spatial_parallel.partition import (
    DIM_NAMES,
    TransposeWindow,
    Window,
    block_bounds,
    plan_dim,
    window_plan,
)
from sciml.spatial_parallel.planner_graph import Layer

#: ``(data, depth, height, width)`` ranks.
Grid = tuple[int, int, int, int]


class GridError(ValueError):
    """A process grid cannot split the model's activations (the reason is the message)."""


@dataclass(frozen=True)
class Halo:
    """Worst-rank halo of one layer: elements received along each split dim, and boundary."""

    received: tuple[int, int, int]
    boundary: tuple[int, int, int]


def largest(size: int, parts: int) -> int:
    """Size of the largest of ``parts`` blocks of ``size`` (the first)."""
    lo, hi = block_bounds(size, parts)[0]
    return hi - lo


def local_numel(shape: Sequence[int], grid: Grid) -> int:
    """Elements of the largest block of a global tensor of ``shape`` on ``grid``.

    An ``(N, C, D, H, W)`` tensor is split along all four axes; any other
    (the dense head's) along its batch only.
    """
    if len(shape) != 5:
        return largest(shape[0], grid[0]) * math.prod(shape[1:]) if shape else 1
    n, c, *spatial = shape
    return (
        largest(n, grid[0])
        * c
        * math.prod(largest(s, p) for s, p in zip(spatial, grid[1:], strict=True))
    )


@functools.lru_cache(maxsize=4096)
def _widest_halo(window: Window | TransposeWindow, size: int, out: int, parts: int) -> int | None:
    """Widest halo any of ``parts`` ranks receives along one dim (``None``: cannot split)."""
    try:
        if isinstance(window, Window):
            plan = window_plan(window, size, parts, layer="layer", dim="dim")
        else:
            needs = [window.input_range(lo, hi, size) for lo, hi in block_bounds(out, parts)]
            plan = plan_dim(size, parts, out, needs)
    except ValueError:
        return None
    return max(
        sum(p.size for p in pieces if p.source is not None and p.source != rank)
        for rank, pieces in enumerate(plan.pieces)
    )


def layer_halo(layer: Layer, grid: Grid) -> Halo:
    """The widest halo any rank of ``grid`` receives for ``layer`` (partition maths).

    Raises:
        GridError: If a block is smaller than the halo it must supply.
    """
    received, boundary = [0, 0, 0], [0, 0, 0]
    if layer.windows is None:
        return Halo((0, 0, 0), (0, 0, 0))
    for k, parts in enumerate(grid[1:]):
        if parts == 1:
            continue
        size = layer.in_shape[2 + k]
        widest = _widest_halo(layer.windows[k], size, layer.out_shape[2 + k], parts)
        if widest is None:
            smallest = min(hi - lo for lo, hi in block_bounds(size, parts))
            raise GridError(
                f"layer '{layer.name}' ({layer.kind}): {DIM_NAMES[k]} of size {size} over "
                f"{parts} ranks leaves blocks of {smallest}, too small for its halo"
            )
        received[k] = widest
        stride = getattr(layer.windows[k], "stride", 1)
        boundary[k] = min(largest(layer.out_shape[2 + k], parts), 2 * -(-received[k] // stride))
    return Halo(tuple(received), tuple(boundary))  # type: ignore[arg-type]


def halo_bytes(layer: Layer, grid: Grid, halo: Halo) -> list[float]:
    """Bytes received along each dim in turn (earlier dims' halos travel on)."""
    n, c, *spatial = layer.in_shape
    block = [largest(s, p) for s, p in zip(spatial, grid[1:], strict=True)]
    face = largest(n, grid[0]) * c * layer.itemsize
    out: list[float] = []
    for k in range(3):
        extents = [b + (halo.received[j] if j < k else 0) for j, b in enumerate(block)]
        extents[k] = halo.received[k]
        out.append(face * math.prod(extents))
    return out
