"""Blocks and halos the planner prices, against the partition maths done by hand."""

from __future__ import annotations

import pytest
from torch import nn

from sciml.models import UNet
from sciml.spatial_parallel.partition import Window, block_bounds
from sciml.spatial_parallel.planner_graph import trace
from sciml.spatial_parallel.planner_halo import (
    GridError,
    halo_bytes,
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


def test_halo_bytes_closed_form() -> None:
    graph = trace(nn.Conv3d(3, 3, 3, padding=1), (1, 3, 8, 8, 8))
    grid = (1, 2, 2, 1)
    halo = layer_halo(graph.layers[0], grid)
    assert halo.received == (1, 1, 0)
    # blocks 4 x 4 x 8; depth sends a 1 x 4 x 8 face, height a (4 + 1) x 1 x 8 face
    assert halo_bytes(graph.layers[0], grid, halo) == [3 * 4 * 32, 3 * 4 * 40, 0]
    # together: the assembled block minus the own block
    assert sum(halo_bytes(graph.layers[0], grid, halo)) == 3 * 4 * (5 * 5 * 8 - 4 * 4 * 8)


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
