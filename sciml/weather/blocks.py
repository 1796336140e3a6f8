"""Blocks of start dates: how ``weather evaluate`` and ``weather score`` read a test file.

A block is a slice of ``time`` (start dates) read, scored and released before the next; a
score keeps sums and counts over the blocks, so the memory is set by the block, not by the
file (:mod:`sciml.weather.verify`, :mod:`sciml.weather.postprocess.evaluate_blocks`).
"""

from __future__ import annotations

from collections.abc import Sequence

import xarray as xr

__all__ = ["BLOCK_BYTES", "auto_block_dates", "date_blocks"]

#: Default size of a block: the float64 bytes of every scored variable's ensemble for the
#: block's start dates (the scoring holds a few times this).
BLOCK_BYTES = 32 * 2**20


def auto_block_dates(
    data: xr.Dataset, variables: Sequence[str], *, budget: int = BLOCK_BYTES
) -> int:
    """The start dates per block whose ensembles take about ``budget`` bytes in float64."""
    dates = max(data.sizes.get("time", 1), 1)
    per_date = sum(8 * data[var].size // dates for var in variables)
    return max(1, budget // max(per_date, 1))


def date_blocks(dates: int, size: int) -> list[slice]:
    """``time`` slices of at most ``size`` start dates covering ``dates``.

    Raises:
        ValueError: ``size`` below 1.
    """
    if size < 1:
        raise ValueError(f"a block needs at least one start date, got {size}")
    return [slice(start, min(start + size, dates)) for start in range(0, dates, size)]
