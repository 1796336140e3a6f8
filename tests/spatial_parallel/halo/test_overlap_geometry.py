"""Overlap geometry against brute-force enumeration of what each output reads (no processes)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sciml.spatial_parallel.halo.overlap import (
    Box,
    Overlap,
    additive_overlap,
    intersect,
    shell_boxes,
    shift,
    window_overlap,
)
from sciml.spatial_parallel.partition import DimPlan, HaloError, Window, window_plan


def reads(window: Window, out: int) -> list[int]:
    """Global input indices output ``out`` reads (the definition of a sliding window)."""
    return [out * window.stride - window.pad_lo + j * window.dilation for j in range(window.kernel)]


def coverage(shape: tuple[int, ...], boxes: list[Box]) -> np.ndarray:
    """How many of ``boxes`` hold each element of an array of ``shape``."""
    count = np.zeros(shape, dtype=int)
    for box in boxes:
        count[tuple(slice(lo, hi) for lo, hi in box)] += 1
    return count


@st.composite
def axis_plans(draw: st.DrawFn, *, same: bool = False) -> tuple[Window, DimPlan, int]:
    """A window, its plan along one axis and a rank's coordinate (``same``: stride 1, 'same')."""
    kernel = draw(st.integers(1, 5))
    dilation = draw(st.integers(1, 3))
    if same:
        assume(kernel % 2 == 1)
        pad = dilation * (kernel - 1) // 2
        window = Window(kernel, 1, dilation, pad, pad)
    else:
        pad_lo = draw(st.integers(0, 3))
        window = Window(
            kernel,
            draw(st.integers(1, 3)),
            dilation,
            pad_lo,
            draw(st.integers(0, 3)) if draw(st.booleans()) else pad_lo,
            draw(st.booleans()),
        )
    size, parts = draw(st.integers(1, 24)), draw(st.integers(1, 4))
    try:
        plan = window_plan(window, size, parts, layer="conv", dim="depth")
    except (HaloError, ValueError):
        assume(False)
    coord = draw(st.integers(0, parts - 1))
    assume(plan.out_blocks[coord][1] > plan.out_blocks[coord][0])  # else no overlap path
    return window, plan, coord


def unpack(
    axes: list[tuple[Window, DimPlan, int]],
) -> tuple[list[Window], list[DimPlan], list[int]]:
    return [w for w, _, _ in axes], [p for _, p, _ in axes], [c for _, _, c in axes]


def own_only(window: Window, plan: DimPlan, coord: int, out: int) -> bool:
    """True when output ``out`` (global) reads nothing outside this rank's input block."""
    lo, hi = plan.blocks[coord]
    return all(lo <= i < hi for i in reads(window, out))


def check_partition(geometry: Overlap, interior: Box | None) -> None:
    shape = tuple(hi for _, hi in geometry.full)
    boxes = list(geometry.shells) + ([interior] if interior is not None else [])
    assert all(hi > lo for box in geometry.shells for lo, hi in box)
    assert (coverage(shape, boxes) == 1).all()


@settings(max_examples=300, deadline=None)
@given(st.lists(axis_plans(), min_size=1, max_size=3))
def test_window_overlap_interior_reads_only_the_own_block(
    axes: list[tuple[Window, DimPlan, int]],
) -> None:
    windows, plans, coords = unpack(axes)
    geometry = window_overlap(windows, plans, coords)
    expected, expected_input = [], []
    for window, plan, coord in axes:
        o0, o1 = plan.out_blocks[coord]
        inside = [o for o in range(o0, o1) if own_only(window, plan, coord, o)]
        expected.append((inside[0] - o0, inside[-1] + 1 - o0) if inside else None)
        read = [i - plan.blocks[coord][0] for o in inside for i in reads(window, o)]
        expected_input.append((min(read), max(read) + 1) if inside else None)
    if None in expected:
        assert geometry.interior is None and geometry.interior_input is None
        assert geometry.shells == (geometry.full,)
    else:
        assert geometry.interior == tuple(expected)
        assert geometry.interior_input == tuple(expected_input)
        for (lo, hi), plan, coord in zip(geometry.interior_input, plans, coords, strict=True):
            assert 0 <= lo < hi <= plan.blocks[coord][1] - plan.blocks[coord][0]
    check_partition(geometry, geometry.interior)


@settings(max_examples=300, deadline=None)
@given(st.lists(axis_plans(), min_size=1, max_size=3))
def test_window_overlap_shells_read_their_box_of_the_extended_input(
    axes: list[tuple[Window, DimPlan, int]],
) -> None:
    windows, plans, coords = unpack(axes)
    geometry = window_overlap(windows, plans, coords)
    assert len(geometry.shell_inputs) == len(geometry.shells)
    for box, inputs in zip(geometry.shells, geometry.shell_inputs, strict=True):
        for window, plan, coord, (a, b), (lo, hi) in zip(
            windows, plans, coords, box, inputs, strict=True
        ):
            o0 = plan.out_blocks[coord][0]
            need_lo, need_hi = plan.needs[coord]
            read = [i - need_lo for o in range(o0 + a, o0 + b) for i in reads(window, o)]
            assert (lo, hi) == (min(read), max(read) + 1)
            assert 0 <= lo < hi <= need_hi - need_lo


@settings(max_examples=300, deadline=None)
@given(st.lists(axis_plans(same=True), min_size=1, max_size=3))
def test_additive_overlap_shells_hold_every_output_that_reads_a_neighbour(
    axes: list[tuple[Window, DimPlan, int]],
) -> None:
    windows, plans, coords = unpack(axes)
    geometry = additive_overlap(windows, plans, coords)
    assert geometry.interior == geometry.interior_input == geometry.full
    shape = tuple(hi for _, hi in geometry.full)
    count = coverage(shape, list(geometry.shells))
    assert count.max(initial=0) <= 1
    for where in itertools.product(*(range(n) for n in shape)):
        neighbour = edge = False
        for (window, plan, coord), o in zip(axes, where, strict=True):
            lo, hi = plan.blocks[coord]
            read = reads(window, plan.out_blocks[coord][0] + o)
            neighbour |= any(0 <= i < plan.size and not lo <= i < hi for i in read)
            edge |= any(not lo <= i < hi for i in read)
        # a neighbour's data must be added in a shell; the shells stay at the block's edges
        assert count[where] >= neighbour and edge >= count[where], where


def test_additive_overlap_halo_between_neighbour_and_global_edge() -> None:
    """Rank 0 of a size-2 axis over 2 ranks, kernel 5: its upper halo is rank 1's only
    element, then the padding beyond the global edge; the output reads rank 1: a shell."""
    window = Window(5, 1, 1, 2, 2)
    plan = window_plan(window, 2, 2, layer="conv", dim="height")
    geometry = additive_overlap([window], [plan], [0])
    assert geometry.shells == (((0, 1),),)
    assert geometry.shell_inputs == (((0, 5),),)


def test_intersect_is_relative_to_both_boxes() -> None:
    assert intersect(((2, 8), (0, 4)), ((6, 10), (1, 3))) == (((4, 6), (1, 3)), ((0, 2), (0, 2)))
    assert intersect(((0, 4),), ((4, 6),)) is None
    assert shift(((3, 5),), ((2, 9),)) == ((1, 3),)


@pytest.mark.parametrize(
    ("full", "inner"),
    [
        (((0, 5), (0, 6)), ((1, 4), (2, 6))),
        (((0, 5), (0, 6)), ((0, 5), (0, 6))),
        (((0, 5), (0, 6)), ((2, 2), (1, 3))),
        (((0, 3),), ((1, 2),)),
    ],
)
def test_shell_boxes_cover_the_rest_once(full: Box, inner: Box) -> None:
    shells = shell_boxes(full, inner)
    shape = tuple(hi for _, hi in full)
    has_inner = all(b > a for a, b in inner)
    assert (coverage(shape, shells + ([inner] if has_inner else [])) == 1).all()
