"""sciml.volumes.reference: summary statistics and the fitted classical estimator."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from sciml.volumes.data import PARAMS, gaussian_field, write_cosmology
from sciml.volumes.reference import reference_errors, summary_statistics


def test_the_statistics_recover_a_known_mean_spread_and_slope() -> None:
    # Without shot noise or skew (counts = nbar * exp(s * delta - s**2 / 2), s small, huge
    # nbar), the statistics are the field's own: log mean, log spread, spectral slope.
    rng = np.random.default_rng(0)
    delta = gaussian_field(32, -2.0, rng)
    nbar, spreads = 1e6, np.array([0.02, 0.03, 0.04, 0.05])
    counts = np.stack([nbar * np.exp(s * delta - s**2 / 2) for s in spreads])
    stats = summary_statistics(counts)
    # delta has mean 0 and variance 1 exactly, so the mean is 1 up to its skewness term, s**3
    np.testing.assert_allclose(stats[:4], np.log(nbar), atol=spreads.max() ** 3)
    # the spread is exact up to the shot noise the estimator subtracts (here there is none):
    # a relative bias of 1 / (2 nbar s**2), plus O(s**2) from the log-normal
    bias = 1 / (2 * nbar * spreads**2) + spreads**2
    np.testing.assert_array_less(np.abs(np.exp(stats[4:8]) / spreads - 1), bias)
    # P(k) ~ k**-2 in expectation; the lowest bins hold few modes, so the fit is
    # within a few tenths of the slope (cosmic variance), as it is meant to measure
    assert stats[8] == pytest.approx(-2.0, abs=0.3)


def test_the_fitted_estimator_beats_the_constant_on_the_poisson_mean(tmp_path: Path) -> None:
    train = write_cosmology(tmp_path / "train.zarr", samples=40, size=8, seed=1, chunks=8)
    test = write_cosmology(tmp_path / "test.zarr", samples=20, size=8, seed=2, chunks=8)
    errors = reference_errors(train, test)
    assert list(errors) == list(PARAMS)
    # nbar, a Poisson mean over 2,048 counts, is known to a few per cent of its range;
    # a constant scores ~0.5 on a parameter uniform in [-1, 1]
    assert errors["nbar"] < 0.15


def test_bad_volumes_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"shape \(4, n, n, n\)"):
        summary_statistics(np.ones((3, 8, 8, 8)))
    with pytest.raises(ValueError, match="edge must be >= 4"):
        summary_statistics(np.ones((4, 2, 2, 2)))
    with pytest.raises(ValueError, match="mean is 0"):
        summary_statistics(np.zeros((4, 8, 8, 8)))
    small = write_cosmology(tmp_path / "a.zarr", samples=3, size=8, seed=1)
    large = write_cosmology(tmp_path / "b.zarr", samples=3, size=12, seed=2)
    with pytest.raises(ValueError, match="edge 12"):
        reference_errors(small, large)


def test_a_channels_last_store_gives_the_same_errors(tmp_path: Path) -> None:
    # Before: the volume was taken by position, so (sample, z, y, x, channel) was read as
    # (8, 8, 8, 4) and refused as counts of another shape.
    train = write_cosmology(tmp_path / "train.zarr", samples=12, size=8, seed=1, chunks=8)
    test = write_cosmology(tmp_path / "test.zarr", samples=6, size=8, seed=2, chunks=8)
    ds = xr.open_zarr(train).load().drop_encoding()
    ds["volume"] = ds["volume"].transpose("sample", "z", "y", "x", "channel")
    ds.to_zarr(tmp_path / "last.zarr", write_empty_chunks=True)
    assert reference_errors(tmp_path / "last.zarr", test) == reference_errors(train, test)
