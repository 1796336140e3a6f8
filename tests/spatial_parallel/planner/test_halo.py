"""Blocks and halos the planner prices, against the partition maths done by hand."""

from __future__ import annotations

import functools
import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from torch import nn

from sciml.models import UNet
from sciml.spatial_parallel.halo.plan import build_halo_plan
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.partition import Window, block_bounds, window_plan
from sciml.spatial_parallel.planner.graph import trace
from sciml.spatial_parallel.planner.halo import (
    GridError,
    halo_bytes,
    halo_messages,
    largest,
    layer_halo,
    local_numel,
)


def _received(window: Window, size: int, parts: int) -> int:
    """Widest halo any rank receives: its needed range clipped to the volume, minus its block."""
    out = window.output_size(size)
    widest = 0
    for (lo, hi), (out_lo, out_hi) in zip(
        block_bounds(size, parts), block_bounds(out, parts), strict=True
    ):
        a, b = window.input_range(out_lo, out_hi)
        widest = max(widest, max(0, lo - max(a, 0)) + max(0, min(b, size) - hi))
    return widest


@pytest.mark.parametrize("grid", [(1, 2, 1, 1), (1, 1, 3, 1), (1, 2, 2, 4), (2, 4, 1, 2)])
def test_halo_of_every_layer_matches_the_partition_maths(grid: tuple[int, int, int, int]) -> None:
    graph = trace(UNet(1, 2, base_channels=2, depth=2), (2, 1, 16, 24, 16))
    for layer in graph.layers:
        if layer.kind not in ("Conv3d", "MaxPool3d"):
            continue
        halo = layer_halo(layer, grid)
        for k, parts in enumerate(grid[1:]):
            window = layer.windows[k]  # type: ignore[index]
            assert isinstance(window, Window)
            expected = _received(window, layer.in_shape[2 + k], parts) if parts > 1 else 0
            assert halo.received[k] == expected, (layer.name, k)


def test_halo_bytes_and_messages_closed_form() -> None:
    graph = trace(nn.Conv3d(3, 3, 3, padding=1), (1, 3, 8, 8, 8))
    grid = (1, 2, 2, 1)
    halo = layer_halo(graph.layers[0], grid)
    assert halo.received == (1, 1, 0) and halo.peers == (1, 1, 0)
    # blocks 4 x 4 x 8: the assembled block minus the own block
    assert halo_bytes(graph.layers[0], grid, halo) == 3 * 4 * (5 * 5 * 8 - 4 * 4 * 8)
    # a 1 x 4 x 8 face from the depth neighbour (2 ranks on), a 4 x 1 x 8 face from the
    # height neighbour (1 on) and a 1 x 1 x 8 edge from the diagonal one
    messages = halo_messages(graph.layers[0], grid, halo)
    assert sorted(messages) == [(1, 3 * 4 * 8, 3), (1, 3 * 4 * 32, 1), (1, 3 * 4 * 32, 2)]


def _plan_messages(
    layer: object, grid: tuple[int, int, int, int], rank: int
) -> tuple[Counter[int], dict[int, int]]:
    """Elements rank ``rank`` receives from each peer, by the layers' own halo plans."""
    coords = tuple(int(c) for c in np.unravel_index(rank, grid))
    # what build_halo_plan reads of a SpatialMesh (which needs a process group)
    mesh = SimpleNamespace(shape=grid, spatial_coords=coords[1:], data_index=coords[0])
    mesh.rank_of = functools.partial(SpatialMesh.rank_of, mesh)
    mesh.halo_group = None
    axes = tuple(2 + k for k in range(3) if grid[1 + k] > 1)
    plans = tuple(
        window_plan(
            layer.windows[a - 2],  # type: ignore[attr-defined]
            layer.in_shape[a],  # type: ignore[attr-defined]
            grid[a - 1],
            layer="layer",
            dim="dim",
        )
        for a in axes
    )
    plan = build_halo_plan(mesh, axes, plans)  # type: ignore[arg-type]
    received: Counter[int] = Counter()
    for region in plan.regions:
        if region.kind == "recv":
            received[region.peer] += math.prod(hi - lo for lo, hi in region.box)
    distance = {peer: abs(peer - rank) for peer in received}
    return received, distance


@pytest.mark.parametrize(
    ("grid", "kernel"),
    [((1, 2, 2, 1), 3), ((1, 4, 1, 1), 3), ((1, 3, 2, 2), 3), ((2, 1, 3, 3), 5), ((1, 2, 1, 4), 2)],
)
def test_messages_are_those_of_the_worst_rank_of_the_halo_plans(
    grid: tuple[int, int, int, int], kernel: int
) -> None:
    shape = (2, 3, 13, 12, 11)  # odd sizes: blocks differ by one
    graph = trace(nn.Conv3d(3, 3, kernel, padding=kernel // 2), shape)
    layer = graph.layers[0]
    halo = layer_halo(layer, grid)
    messages = halo_messages(layer, grid, halo)
    per_rank = [_plan_messages(layer, grid, rank) for rank in range(math.prod(grid))]
    face = largest(shape[0], grid[0]) * shape[1] * layer.itemsize
    # as many messages as the busiest rank receives, none smaller than the largest planned
    assert sum(m.senders for m in messages) == max(len(r) for r, _ in per_rank)
    planned_bytes = [face * max(r.values()) for r, _ in per_rank if r]
    assert max(m.nbytes for m in messages) >= max(planned_bytes)
    assert sum(m.senders * m.nbytes for m in messages) == pytest.approx(
        halo_bytes(layer, grid, halo)
    )
    # the farthest peer of any rank is as far as the farthest message says
    assert max(m.distance for m in messages) == max(max(d.values(), default=0) for _, d in per_rank)


def test_interior_ranks_receive_both_sides() -> None:
    graph = trace(nn.Conv3d(1, 1, 5, padding=2), (1, 1, 12, 4, 4))
    assert layer_halo(graph.layers[0], (1, 2, 1, 1)).received == (2, 0, 0)
    assert layer_halo(graph.layers[0], (1, 3, 1, 1)).received == (4, 0, 0)


def test_largest_block_is_the_first() -> None:
    assert largest(10, 4) == 3 and largest(3, 4) == 1 and largest(0, 2) == 0
    assert local_numel((3, 2, 10, 9, 8), (2, 4, 2, 3)) == 2 * 2 * 3 * 5 * 3
    assert local_numel((5, 7), (2, 4, 1, 1)) == 3 * 7  # dense: split over the batch only


def test_a_block_smaller_than_its_halo_is_named() -> None:
    graph = trace(nn.Sequential(nn.Conv3d(1, 1, 5, padding=2)), (1, 1, 4, 8, 8))
    with pytest.raises(GridError, match=r"layer '0' \(Conv3d\): depth of size 4 over 4 ranks"):
        layer_halo(graph.layers[0], (1, 4, 1, 1))
