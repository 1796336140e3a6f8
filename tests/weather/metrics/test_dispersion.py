"""Dispersion diagnostics (:mod:`.dispersion`) against numpy and xskillscore."""

import numpy as np
import pytest
import xarray as xr
import xskillscore as xs

from sciml.weather import metrics as m
from tests.weather.conftest import random_fields


def test_rank_histogram_matches_xskillscore_and_counts_valid_points() -> None:
    ob, fc = random_fields(np.random.default_rng(14), 6)
    for dim in (None, ["lat", "lon"]):
        got = m.rank_histogram(ob, fc, dim=dim)
        ref = xs.rank_histogram(ob, fc, dim=dim)
        np.testing.assert_array_equal(got.transpose(*ref.dims).values, ref.values)
    ob, fc = random_fields(np.random.default_rng(15), 6, ties=True, nans=True)
    got = m.rank_histogram(ob, fc)
    valid = int((ob.notnull() & fc.notnull().all("member")).sum())
    assert got.sizes["rank"] == 7 and int(got.sum()) == valid
    assert list(got["rank"].values) == list(range(1, 8))


def test_spread_rmse_ratio_against_numpy_and_calibrated_ensemble() -> None:
    rng = np.random.default_rng(16)
    ob, fc = random_fields(rng, 5, nans=False)
    ens = fc.values
    np.testing.assert_allclose(m.ensemble_spread(fc), np.sqrt(np.var(ens, 0, ddof=1).mean()))
    err2 = (ens.mean(0) - ob.values) ** 2
    np.testing.assert_allclose(m.ensemble_mean_rmse(ob, fc), np.sqrt(err2.mean()))
    np.testing.assert_allclose(m.ensemble_mean_rmse(ob, fc, dim=[]), np.sqrt(err2))
    w = m.latitude_weights(ob).values[None, :, None]
    wmean = (err2 * w).sum() / np.broadcast_to(w, err2.shape).sum()
    np.testing.assert_allclose(
        m.ensemble_mean_rmse(ob, fc, weights=m.latitude_weights(ob)), np.sqrt(wmean)
    )
    # members and truth drawn from the same distribution: corrected ratio ~ 1
    M = 4
    truth_and_members = rng.standard_normal((M + 1, 200_000))
    ob = xr.DataArray(truth_and_members[0], dims="x")
    fc = xr.DataArray(truth_and_members[1:], dims=("member", "x"))
    assert float(m.spread_skill_ratio(ob, fc)) == pytest.approx(1.0, abs=0.01)
    raw = float(m.spread_skill_ratio(ob, fc, corrected=False))
    assert raw == pytest.approx(np.sqrt(M / (M + 1)), abs=0.01)
