"""Exact quantiles of values added a block at a time, in memory set by a budget, not the data.

The extreme-event threshold of ``weather evaluate`` is a quantile of every start date and
grid point of a lead time (:mod:`sciml.weather.postprocess.evaluate_blocks`). Its values
are added a block of start dates at a time and wait on disk, one file per row; a row's
quantile is then found by narrowing: a pass over the row's file counts its values in
``bins`` equal bins between the bounds known to hold the wanted order statistic, the bin
holding it becomes the new bounds, and once the values within the bounds fit the budget
they are read and sorted. Each pass reads the file a budget at a time; a row needs about
two passes per order statistic (the budget divided by the bins' count, per pass). The
result is NumPy's ``quantile`` (linear interpolation between the order statistics around
``(n - 1) q``), to the bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["DiskQuantiles"]


class DiskQuantiles:
    """Per row, the ``q`` quantile of the values added (NaNs left out), exact.

    Args:
        folder: Where the values wait (one file per row; the caller removes it).
        name: The rows' file names' start (``<name>_<row>.bin``).
        rows: Number of rows.
        q: The quantile, in [0, 1].
        budget: Values read into memory at a time (float64: 8 bytes each).
        bins: Bins of a narrowing pass.
    """

    def __init__(
        self,
        folder: Path,
        name: str,
        rows: int,
        q: float,
        *,
        budget: int = 2**22,
        bins: int = 4096,
    ) -> None:
        """Prepare empty rows (arguments: see the class)."""
        if not 0 <= q <= 1:
            raise ValueError(f"q must lie in [0, 1], got {q}")
        if budget < 2 or bins < 2:
            raise ValueError(f"budget and bins must be >= 2, got {budget} and {bins}")
        self.q, self.budget, self.bins = q, budget, bins
        self.paths = [folder / f"{name}_{row}.bin" for row in range(rows)]
        for path in self.paths:
            path.write_bytes(b"")
        self.count = np.zeros(rows, dtype=np.int64)
        self.low = np.full(rows, np.inf)
        self.high = np.full(rows, -np.inf)

    def add(self, values: np.ndarray) -> None:
        """Add ``(rows, points)`` values."""
        for row, part in enumerate(np.asarray(values, dtype=np.float64)):
            part = part[~np.isnan(part)]
            if not part.size:
                continue
            self.count[row] += part.size
            self.low[row] = min(self.low[row], part.min())
            self.high[row] = max(self.high[row], part.max())
            with self.paths[row].open("ab") as file:
                part.tofile(file)

    def quantiles(self) -> np.ndarray:
        """Each row's quantile (NaN for a row without values)."""
        out = np.full(self.count.shape, np.nan)
        for row, n in enumerate(self.count.tolist()):
            if n == 0:
                continue
            virtual = (n - 1) * self.q
            lower = min(math.floor(virtual), n - 1)
            a = self._order_statistic(row, lower)
            if lower == n - 1:
                out[row] = a
                continue
            b = self._order_statistic(row, lower + 1)
            gamma = virtual - math.floor(virtual)
            diff = b - a  # numpy's interpolation, written as numpy writes it
            out[row] = b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma
        return out

    def _pieces(self, row: int) -> Iterator[np.ndarray]:
        """Row ``row``'s values, a budget at a time."""
        with self.paths[row].open("rb") as file:
            while True:
                piece = np.fromfile(file, dtype=np.float64, count=self.budget)
                if not piece.size:
                    return
                yield piece

    def _order_statistic(self, row: int, k: int) -> float:
        """The ``k``-th smallest value of row ``row`` (0-based)."""
        low, high = float(self.low[row]), float(self.high[row])
        below = 0  # values < low
        while True:  # the answer lies in [low, high]
            if low == high:
                return low
            edges = np.linspace(low, high, self.bins + 1)
            counts = np.zeros(self.bins, dtype=np.int64)
            for piece in self._pieces(row):
                inside = piece[(piece >= low) & (piece <= high)]
                index = np.clip(np.searchsorted(edges, inside, side="right") - 1, 0, self.bins - 1)
                counts += np.bincount(index, minlength=self.bins)
            if counts.sum() <= self.budget:
                return self._select(row, low, high, k - below)
            at = int(np.searchsorted(np.cumsum(counts), k - below, side="right"))
            # the bin [edges[at], edges[at + 1]), closed on the right for the last one
            narrowed = float(edges[at]), float(edges[at + 1])
            if at < self.bins - 1:
                narrowed = narrowed[0], float(np.nextafter(narrowed[1], -np.inf))
            if narrowed == (low, high):  # a span of a few representable values: count each
                return self._by_value(row, low, high, k - below)
            below += int(counts[:at].sum())
            low, high = narrowed

    def _select(self, row: int, low: float, high: float, k: int) -> float:
        """The ``k``-th smallest value within ``[low, high]`` of row ``row``."""
        kept = [piece[(piece >= low) & (piece <= high)] for piece in self._pieces(row)]
        values = np.concatenate(kept)
        return float(np.partition(values, k)[k])

    def _by_value(self, row: int, low: float, high: float, k: int) -> float:
        """The ``k``-th smallest value within ``[low, high]``, a span of few distinct values."""
        counts: dict[float, int] = {}
        for piece in self._pieces(row):
            values, times = np.unique(piece[(piece >= low) & (piece <= high)], return_counts=True)
            for value, count in zip(values.tolist(), times.tolist(), strict=True):
                counts[value] = counts.get(value, 0) + count
        for value in sorted(counts):
            k -= counts[value]
            if k < 0:
                return value
        raise AssertionError("the order statistic lies outside its bounds")
