"""Halo plans: which boxes of a rank's extended input come from where.

:func:`build_halo_plan` turns the per-dimension :class:`DimPlan` of a layer
into the regions of this rank's *extended* input (own data, data received
from a neighbour, padding) and the regions it sends. Regions are products of
per-dimension pieces, so edges and corners of multi-dimensional splits come
straight from the diagonal neighbours in one round of non-blocking
point-to-point messages (:mod:`sciml.spatial_parallel.halo.exchange`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from sciml.spatial_parallel.halo.overlap import Box
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.partition import DimPlan, Piece

Index = slice | tuple[int, ...]


@dataclass(frozen=True)
class Region:
    """A box of the extended input and where its data come from.

    ``kind`` is ``"local"`` (``index`` into this rank's block), ``"recv"``
    (from global rank ``peer`` with message ``tag``) or ``"fill"``.
    """

    box: Box
    kind: str
    peer: int = -1
    tag: int = 0
    index: tuple[Index, ...] = ()


@dataclass(frozen=True)
class Send:
    """A box of this rank's block (``index``) sent to global rank ``peer`` as ``tag``."""

    peer: int
    tag: int
    index: tuple[Index, ...]


@dataclass(frozen=True)
class HaloPlan:
    """This rank's part of one layer's halo exchange.

    Attributes:
        axes: Tensor axes (2, 3 or 4) assembled explicitly.
        plans: The :class:`DimPlan` of each of those axes.
        coords: This rank's index along each of those axes.
        ext: Extended size along each of those axes.
        regions: Pieces of the extended input.
        sends: Pieces of this rank's block that neighbours need.
        fill: Value of padding outside the global volume.
    """

    axes: tuple[int, ...]
    plans: tuple[DimPlan, ...]
    coords: tuple[int, ...]
    ext: tuple[int, ...]
    regions: tuple[Region, ...]
    sends: tuple[Send, ...]
    fill: float
    group: Any = None

    @property
    def full_box(self) -> Box:
        """The whole extended input."""
        return tuple((0, n) for n in self.ext)

    @property
    def needs_exchange(self) -> bool:
        """True when anything must be sent or received."""
        return bool(self.sends) or any(r.kind == "recv" for r in self.regions)


def _offsets(pieces: tuple[Piece, ...]) -> list[tuple[int, int]]:
    spans, lo = [], 0
    for piece in pieces:
        spans.append((lo, lo + piece.size))
        lo += piece.size
    return spans


def build_halo_plan(
    mesh: SpatialMesh, axes: tuple[int, ...], plans: tuple[DimPlan, ...], *, fill: float = 0.0
) -> HaloPlan:
    """Regions and sends of this rank for the per-axis plans ``plans`` of ``axes``."""
    spatial = mesh.spatial_coords
    coords = tuple(spatial[axis - 2] for axis in axes)

    def rank_at(changes: dict[int, int]) -> int:
        full = list(spatial)
        for axis, coord in changes.items():
            full[axis - 2] = coord
        return mesh.rank_of(mesh.data_index, *full)

    def combos(where: tuple[int, ...]) -> list[tuple[int, tuple[Piece, ...], Box]]:
        per_axis = [plan.pieces[c] for plan, c in zip(plans, where, strict=True)]
        spans = [_offsets(p) for p in per_axis]
        return [
            (
                tag,
                tuple(per_axis[k][i] for k, i in enumerate(choice)),
                tuple(spans[k][i] for k, i in enumerate(choice)),
            )
            for tag, choice in enumerate(itertools.product(*(range(len(p)) for p in per_axis)))
        ]

    regions = []
    for tag, pieces, box in combos(coords):
        if any(p.source is None for p in pieces):
            regions.append(Region(box, "fill"))
            continue
        sources = tuple(p.source for p in pieces if p.source is not None)
        if sources == coords:
            index = tuple(
                p.local(plan.blocks[c][0]) for p, plan, c in zip(pieces, plans, coords, strict=True)
            )
            regions.append(Region(box, "local", index=index))
        else:
            peer = rank_at(dict(zip(axes, sources, strict=True)))
            regions.append(Region(box, "recv", peer=peer, tag=tag))
    sends = []
    for where in itertools.product(*(range(plan.parts) for plan in plans)):
        if where == coords:
            continue
        for tag, pieces, _ in combos(where):
            if tuple(p.source for p in pieces) == coords:
                index = tuple(
                    p.local(plan.blocks[c][0])
                    for p, plan, c in zip(pieces, plans, coords, strict=True)
                )
                sends.append(Send(rank_at(dict(zip(axes, where, strict=True))), tag, index))
    ext = tuple(sum(p.size for p in plan.pieces[c]) for plan, c in zip(plans, coords, strict=True))
    return HaloPlan(axes, plans, coords, ext, tuple(regions), tuple(sends), fill, mesh.halo_group)
