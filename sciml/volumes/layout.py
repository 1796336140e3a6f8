"""A volume's dimensions, found by name, and a rank's block of it.

A store names the dimensions of a volume in its own way (:data:`DIM_NAMES`:
``n``/``batch``, ``c``/``channels``, ``x``/``width`` ...): :func:`dims_by_name`
finds them, and a volume is read as :data:`VOLUME_DIMS`; :func:`block_slices`
is one rank's block of a split volume, widened by a halo.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sciml.spatial_parallel.partition import block_bounds

__all__ = ["DIM_NAMES", "VOLUME_DIMS", "block_slices", "dims_by_name"]

#: The names a store may give each dimension (compared in lower case), by the one it is read as.
DIM_NAMES = {
    "sample": ("sample", "samples", "n", "batch", "index"),
    "channel": ("channel", "channels", "c", "redshift", "redshifts"),
    "z": ("z", "depth", "d"),
    "y": ("y", "height", "h"),
    "x": ("x", "width", "w"),
}
#: A volume's dimensions as it is read.
VOLUME_DIMS = tuple(DIM_NAMES)


def block_slices(
    shape: Sequence[int], grid: Sequence[int], coords: Sequence[int], *, halo: int = 0
) -> tuple[slice, ...]:
    """Slices of block ``coords`` of a ``grid`` split of a volume ``shape``, widened by ``halo``.

    Blocks follow :func:`torch.tensor_split` (as :func:`sciml.spatial_parallel.shard`);
    the halo is clipped at the volume's edges.
    """
    slices = []
    for size, parts, coord in zip(shape, grid, coords, strict=True):
        lo, hi = block_bounds(int(size), int(parts))[coord]
        slices.append(slice(max(lo - halo, 0), min(hi + halo, int(size))))
    return tuple(slices)


def dims_by_name(dims: Sequence[Any], wanted: Sequence[str], *, what: str) -> dict[str, str]:
    """The store's name of each of the ``wanted`` dims, found by :data:`DIM_NAMES`.

    Args:
        dims: The dims of a variable in the store, in its order.
        wanted: The dims it must have, in the order they are read.
        what: The variable and the file, for the error message.

    Raises:
        ValueError: If a wanted dim is not there, is there twice (under two of
            its names), or the variable has other dims; naming the dims found
            and the ones expected.
    """
    found: dict[str, list[str]] = {name: [] for name in wanted}
    others: list[str] = []
    for dim in map(str, dims):
        role = next((r for r in wanted if dim.lower() in DIM_NAMES[r]), None)
        (found[role] if role is not None else others).append(dim)
    if others or any(len(names) != 1 for names in found.values()):
        names = "; ".join(f"{role}: {', '.join(DIM_NAMES[role])}" for role in wanted)
        raise ValueError(
            f"{what} has dims {tuple(map(str, dims))}, expected ({', '.join(wanted)}) in any "
            f"order, each under one of its names ({names})"
        )
    return {role: names[0] for role, names in found.items()}
