"""Overlap geometry: what an output block can compute before its halos arrive.

A sliding-window layer that overlaps its halo exchange with computation splits
this rank's output block into an *interior* (outputs whose windows read only
the rank's own input block) and *shells* (the rest), and reads each shell from
a box of the *extended* input (own block plus halos and padding, as assembled
by :mod:`sciml.spatial_parallel.halo`). This module is that integer box
arithmetic alone, on the per-dimension plans of
:mod:`sciml.spatial_parallel.partition`: no tensors, no processes, so every
case can be checked directly (``tests/spatial_parallel/halo/test_overlap_geometry.py``).

Boxes are ``((lo, hi), ...)``, half-open, one pair per explicitly assembled
axis, in the coordinates the docstrings name (output block, input block or
extended input, each starting at 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sciml.spatial_parallel.partition import DimPlan, Window

Box = tuple[tuple[int, int], ...]


def shift(box: Box, origin: Box) -> Box:
    """``box`` in coordinates that start at ``origin``'s lower corner."""
    return tuple((lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin, strict=True))


def intersect(box: Box, region: Box) -> tuple[Box, Box] | None:
    """The part of ``region`` inside ``box``, relative to ``box`` and relative to ``region``.

    ``None`` when they do not overlap.
    """
    part = tuple((max(a, c), min(b, d)) for (a, b), (c, d) in zip(region, box, strict=True))
    if any(lo >= hi for lo, hi in part):
        return None
    return shift(part, box), shift(part, region)


def shell_boxes(full: Box, inner: Box) -> list[Box]:
    """Non-empty boxes that cover ``full`` minus ``inner``, without overlap.

    Axis by axis, the slabs below and above ``inner`` (the earlier axes already
    narrowed to ``inner``); an empty ``inner`` along an axis ends the sweep, the
    slabs then cover the rest of ``full``.
    """
    shells: list[Box] = []
    current = list(full)
    for k, (a, b) in enumerate(inner):
        for piece in ((current[k][0], a), (b, current[k][1])):
            if piece[1] > piece[0]:
                shells.append(tuple(current[:k] + [piece] + current[k + 1 :]))
        current[k] = (a, b)
        if b <= a:
            break
    return shells


@dataclass(frozen=True)
class Overlap:
    """How one rank computes its output block around the halo exchange.

    Attributes:
        full: The output block, in output-block coordinates.
        interior: Outputs that read only this rank's input block (output-block
            coordinates), or ``None`` when there are none.
        interior_input: The input box the interior reads, in input-block
            coordinates (``None`` with ``interior``).
        shells: Output boxes covering the rest of ``full``.
        shell_inputs: The extended-input box each shell reads.
    """

    full: Box
    interior: Box | None
    interior_input: Box | None
    shells: tuple[Box, ...]
    shell_inputs: tuple[Box, ...]


def _output_blocks(plans: Sequence[DimPlan], coords: Sequence[int]) -> Box:
    return tuple(plan.out_blocks[c] for plan, c in zip(plans, coords, strict=True))


def _extended_inputs(
    windows: Sequence[Window], plans: Sequence[DimPlan], coords: Sequence[int], shells: list[Box]
) -> tuple[Box, ...]:
    """The extended-input box (starting at the needed range) that each output shell reads."""
    blocks = _output_blocks(plans, coords)
    origins = tuple(plan.needs[c] for plan, c in zip(plans, coords, strict=True))
    return tuple(
        shift(
            tuple(
                w.input_range(o0 + a, o0 + b)
                for w, (o0, _), (a, b) in zip(windows, blocks, box, strict=True)
            ),
            origins,
        )
        for box in shells
    )


def window_overlap(
    windows: Sequence[Window], plans: Sequence[DimPlan], coords: Sequence[int]
) -> Overlap:
    """Interior and shells of this rank's output block for any sliding window.

    The output block must not be empty along any axis (a rank with an empty
    block only joins the plain exchange).

    Args:
        windows: The window of each explicitly assembled axis.
        plans: The :class:`DimPlan` of each of those axes.
        coords: This rank's index along each of those axes.
    """
    blocks = _output_blocks(plans, coords)
    full = tuple((0, o1 - o0) for o0, o1 in blocks)
    inner, reads = [], []
    for w, plan, coord, (o0, o1) in zip(windows, plans, coords, blocks, strict=True):
        lo, hi = plan.blocks[coord]
        u0 = max(o0, -(-(lo + w.pad_lo) // w.stride))
        u1 = max(u0, min(o1, (hi - w.reach + w.pad_lo) // w.stride + 1))
        inner.append((u0 - o0, u1 - o0))
        a, b = w.input_range(u0, u1)
        reads.append((a - lo, b - lo))
    if all(b > a for a, b in inner):
        shells = shell_boxes(full, tuple(inner))
        interior, interior_input = tuple(inner), tuple(reads)
    else:
        shells, interior, interior_input = [full], None, None
    return Overlap(
        full,
        interior,
        interior_input,
        tuple(shells),
        _extended_inputs(windows, plans, coords, shells),
    )


def additive_overlap(
    windows: Sequence[Window], plans: Sequence[DimPlan], coords: Sequence[int]
) -> Overlap:
    """Shells of a stride-1 window whose output block is its input block (``'same'`` size).

    The interior is the whole block computed with zeros in place of the halos;
    the shells are the outputs whose windows read a neighbour's block (the
    global edge is the operator's own padding), to which the contribution of
    the received halos is added. Arguments as :func:`window_overlap`.
    """
    blocks = _output_blocks(plans, coords)
    full = tuple((0, o1 - o0) for o0, o1 in blocks)
    inner = []
    for w, plan, coord, (_, size) in zip(windows, plans, coords, full, strict=True):
        start, stop = plan.blocks[coord]
        # a halo can hold a neighbour's data between padding and this block (tiny blocks)
        neighbours = [p.index[0] for p in plan.pieces[coord] if p.source not in (None, coord)]
        lo = min(size, w.pad_lo) if any(i < start for i in neighbours) else 0
        hi = max(lo, size - (w.reach - 1 - w.pad_lo))
        inner.append((lo, hi if any(i >= stop for i in neighbours) else size))
    shells = shell_boxes(full, tuple(inner))
    return Overlap(
        full, full, full, tuple(shells), _extended_inputs(windows, plans, coords, shells)
    )
