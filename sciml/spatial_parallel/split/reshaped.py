"""Where the split dims of a block land in a row-major reshape of its global tensor.

A split dim keeps its place when it survives the reshape whole; merged with the
dims after it, or cut into an outer and an inner dim, it stays split in the outer
one where every rank's block lines up with the new dim's standard blocks (patch
tokens on a depth split, windows whole within each block). Anything else (two
split dims merged, blocks that straddle) has no block layout (:mod:`.folded`
keeps such merges on the blocks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sciml.spatial_parallel.partition import block_bounds
from sciml.spatial_parallel.split.tensor import Shape, Split

__all__ = ["reshaped_split"]


def _places(shape: Shape, before: int, size: int) -> list[int]:
    """The dims of ``shape`` of ``size`` with ``before`` elements' worth of dims ahead of them."""
    return [d for d in range(len(shape)) if math.prod(shape[:d]) == before and shape[d] == size]


def _outer_factor(gin: Shape, gout: Shape, dim: int, parts: int) -> int | None:
    """The output dim whose outer factor is split dim ``dim``, or which is its outer factor.

    ``(2, 3, 4) -> (2, 12)`` merges dim 1 with the dims after it (its block of 3
    becomes one of 12), ``(12, 5) -> (4, 3, 5)`` cuts dim 0 into an outer dim of 4
    and an inner one of 3 (the split goes to the outer one): the layout holds when
    every rank's block of ``dim`` is a standard block of the output dim scaled by
    the inner factor (Swin's windows aligned with the blocks), else None.
    """
    before, size, inner = math.prod(gin[:dim]), gin[dim], math.prod(gin[dim + 1 :])
    found = [j for j in range(len(gout)) if math.prod(gout[:j]) == before and gout[j] > 1]
    if not found:
        return None
    j = found[0]
    outer, below = gout[j], math.prod(gout[j + 1 :])
    if size * inner != outer * below:
        return None
    if outer > size and outer % size == 0 and inner == outer // size * below:
        return j if _scaled_blocks(size, outer, parts) else None
    if outer < size and size % outer == 0 and below == size // outer * inner:
        return j if _scaled_blocks(outer, size, parts) else None
    return None


def _scaled_blocks(small: int, large: int, parts: int) -> bool:
    """Whether the standard blocks of ``large`` are those of ``small`` times ``large / small``."""
    scale = large // small
    scaled = [(lo * scale, hi * scale) for lo, hi in block_bounds(small, parts)]
    return [tuple(b) for b in block_bounds(large, parts)] == scaled


def reshaped_split(gin: Shape, gout: Shape, split: Split, grid: Sequence[int]) -> Split | None:
    """Where each split dim lands in a row-major reshape ``gin -> gout``, or None if it mixes.

    A dim of size 1 can land in any of several size-1 dims at the same place; it
    takes the one of the same rank among them (``(1, 1, 2, 6) -> (1, 1, 12)`` keeps dim
    1 as dim 1). A dim merged with the dims after it, or cut into an outer and an inner
    dim, lands in the outer one where the blocks allow (:func:`_outer_factor`); two
    split dims in one output dim, or blocks that do not line up, give None.
    """
    result: list[tuple[int, int]] = []
    for dim, axis in split:
        before = math.prod(gin[:dim])
        rank = _places(gin, before, gin[dim]).index(dim)
        found = _places(gout, before, gin[dim])
        j = found[rank] if rank < len(found) else _outer_factor(gin, gout, dim, grid[axis])
        if j is None or any(j == k for k, _ in result):
            return None
        result.append((j, axis))
    return tuple(result)
