"""Exact quantiles of values that wait on disk: NumPy's ``nanquantile`` to the bit."""

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sciml.weather.disk_quantiles import DiskQuantiles


def _rows(n: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of the kinds a threshold meets: gaps, ties, nothing, a few adjacent floats, spikes."""
    values = rng.standard_normal((5, n))
    values[0, rng.random(n) < 0.1] = np.nan
    values[0, 0] = 0.25  # at least one value
    values[1, : n // 3] = 0.5  # ties at the threshold
    values[2] = np.nan  # a row without values
    values[3] = 1.0 + rng.integers(0, 3, n) * np.spacing(1.0)  # three representable values
    values[4] = np.exp(rng.standard_normal(n) * 8)  # magnitudes spread over decades
    return values


@pytest.mark.parametrize("budget, bins", [(16, 2), (7, 3), (50, 16), (10**6, 4096)])
def test_quantiles_are_numpys_whatever_the_budget(budget: int, bins: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(budget)
    for n in (1, 2, 997):
        values = _rows(n, rng)
        for q in (0.0, 1e-3, 0.05, 0.5, 0.95, 1 - 1e-3, 1.0):
            quantiles = DiskQuantiles(tmp_path, f"q{n}_{q}", 5, q, budget=budget, bins=bins)
            for part in np.array_split(values, min(n, 7), axis=1):  # blocks of dates
                quantiles.add(part)
            got = quantiles.quantiles()
            kept = [0, 1, 3, 4]
            np.testing.assert_array_equal(got[kept], np.nanquantile(values[kept], q, axis=1))
            assert np.isnan(got[2])


def test_memory_is_the_budget_not_the_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    quantiles = DiskQuantiles(tmp_path, "big", 1, 0.95, budget=1000, bins=64)
    values = rng.standard_normal((1, 200_000))
    for part in np.array_split(values, 20, axis=1):
        quantiles.add(part)
    read: list[int] = []
    pieces = quantiles._pieces

    def counted(row: int) -> Iterator[np.ndarray]:  # every read of the file is a budget at most
        for piece in pieces(row):
            read.append(piece.size)
            yield piece

    quantiles._pieces = counted  # type: ignore[method-assign]
    assert quantiles.quantiles()[0] == np.quantile(values, 0.95)
    assert max(read) == 1000 and sum(read) <= 200_000 * 8  # a few passes over the file


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"q must lie in \[0, 1\], got 1.5"):
        DiskQuantiles(tmp_path, "x", 1, 1.5)
    with pytest.raises(ValueError, match="budget and bins must be >= 2"):
        DiskQuantiles(tmp_path, "x", 1, 0.5, budget=1)
