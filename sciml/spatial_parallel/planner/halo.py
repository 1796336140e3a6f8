"""Where a grid puts each layer: the largest block and the widest halo, from the partition maths.

Every tensor is split like :func:`torch.tensor_split`
(:func:`~sciml.spatial_parallel.partition.block_bounds`: the first ranks along
a dim hold the extra element, so rank 0's block is the largest). For each
layer with a window (convolution, pooling, transposed convolution)
:func:`layer_halo` asks :mod:`~sciml.spatial_parallel.partition` for every
rank's pieces along each split dim and keeps the widest halo any rank
receives, and from how many neighbours; a block too small for its halo
makes the grid unusable (:class:`GridError`). :func:`halo_messages` lists the
messages that halo arrives in.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from sciml.spatial_parallel.partition import (
    DIM_NAMES,
    TransposeWindow,
    Window,
    block_bounds,
    plan_dim,
    window_plan,
)
from sciml.spatial_parallel.planner.graph import Layer

#: ``(data, depth, height, width)`` ranks.
Grid = tuple[int, int, int, int]


class GridError(ValueError):
    """A process grid cannot split the model's activations (the reason is the message)."""


@dataclass(frozen=True)
class Halo:
    """Worst-rank halo of one layer along each split dim.

    Attributes:
        received: Elements received (both sides together).
        boundary: Width of the output's boundary shell that needs them.
        peers: Neighbours they come from (0, 1 or 2 for a window narrower than a block).
    """

    received: tuple[int, int, int]
    boundary: tuple[int, int, int]
    peers: tuple[int, int, int]


class Message(NamedTuple):
    """Messages of one kind a rank receives in a halo exchange.

    Attributes:
        senders: How many (one from each neighbour of the kind).
        nbytes: Bytes of each.
        distance: Rank distance to the farthest sender of the kind (inside a node or not).
    """

    senders: int
    nbytes: float
    distance: int


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
def _widest_halo(
    window: Window | TransposeWindow, size: int, out: int, parts: int
) -> tuple[int, int] | None:
    """Widest halo and most neighbours any of ``parts`` ranks receives from along one dim.

    ``None``: the dim cannot be split so.
    """
    try:
        if isinstance(window, Window):
            plan = window_plan(window, size, parts, layer="layer", dim="dim")
        else:
            needs = [window.input_range(lo, hi, size) for lo, hi in block_bounds(out, parts)]
            plan = plan_dim(size, parts, out, needs)
    except ValueError:
        return None
    received = [
        [p for p in pieces if p.source is not None and p.source != rank]
        for rank, pieces in enumerate(plan.pieces)
    ]
    return (
        max(sum(p.size for p in pieces) for pieces in received),
        max(len({p.source for p in pieces}) for pieces in received),
    )


def layer_halo(layer: Layer, grid: Grid) -> Halo:
    """The widest halo any rank of ``grid`` receives for ``layer`` (partition maths).

    Raises:
        GridError: If a block is smaller than the halo it must supply.
    """
    received, boundary, peers = [0, 0, 0], [0, 0, 0], [0, 0, 0]
    if layer.windows is None:
        return Halo((0, 0, 0), (0, 0, 0), (0, 0, 0))
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
        received[k], peers[k] = widest
        stride = getattr(layer.windows[k], "stride", 1)
        boundary[k] = min(largest(layer.out_shape[2 + k], parts), 2 * -(-received[k] // stride))
    return Halo(tuple(received), tuple(boundary), tuple(peers))  # type: ignore[arg-type]


def _block_and_face(layer: Layer, grid: Grid) -> tuple[list[int], float]:
    """The largest block's spatial extents, and bytes per spatial element (batch x channels)."""
    n, c, *spatial = layer.in_shape
    block = [largest(s, p) for s, p in zip(spatial, grid[1:], strict=True)]
    return block, largest(n, grid[0]) * c * layer.itemsize


def halo_bytes(layer: Layer, grid: Grid, halo: Halo) -> float:
    """Bytes of the halos around the largest block: its extended input less the block."""
    block, face = _block_and_face(layer, grid)
    return face * (
        math.prod(b + r for b, r in zip(block, halo.received, strict=True)) - math.prod(block)
    )


def halo_messages(layer: Layer, grid: Grid, halo: Halo) -> list[Message]:
    """The messages the worst rank receives in one exchange of ``layer``'s input.

    A split layer receives each box of its extended input straight from the
    rank that holds it, all in one round (:mod:`~sciml.spatial_parallel.halo.plan`):
    along each set ``S`` of split dims, ``prod(peers[k] for k in S)`` neighbours
    (faces, then edges and corners from the diagonal ones) each send
    ``prod(received[k] / peers[k] for k in S)`` times the block's extent along
    the other dims. Together they are :func:`halo_bytes`.
    """
    block, face = _block_and_face(layer, grid)
    strides = (grid[2] * grid[3], grid[3], 1)
    split = [k for k in range(3) if halo.received[k]]
    messages = []
    for size in range(1, len(split) + 1):
        for dims in itertools.combinations(split, size):
            extents = [
                halo.received[k] / halo.peers[k] if k in dims else block[k] for k in range(3)
            ]
            messages.append(
                Message(
                    math.prod(halo.peers[k] for k in dims),
                    face * math.prod(extents),
                    sum(strides[k] for k in dims),
                )
            )
    return messages
