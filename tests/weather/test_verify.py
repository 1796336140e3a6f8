"""Score summaries, leave-one-out scoring and scoring against observations at valid time."""

import numpy as np
import pytest
import xarray as xr

from sciml.weather import metrics
from sciml.weather.verify import leave_one_out_scores, score_ensemble, score_summary


def test_score_summary_matches_metrics() -> None:
    rng = np.random.default_rng(0)
    fc = xr.DataArray(rng.standard_normal((5, 3, 4)), dims=("member", "lead_time", "x"))
    ob = xr.DataArray(rng.standard_normal((3, 4)), dims=("lead_time", "x"))
    ob[0, 0] = np.nan
    got = score_summary(ob, fc, dim="x")
    xr.testing.assert_allclose(got["crps"], metrics.crps_ensemble(ob, fc, dim="x"))
    xr.testing.assert_allclose(got["crps_fair"], metrics.crps_ensemble(ob, fc, dim="x", fair=True))
    xr.testing.assert_allclose(got["spread_skill"], metrics.spread_skill_ratio(ob, fc, dim="x"))
    # the spread is taken over the points with an observation, like the RMSE
    expected = np.sqrt(fc.var("member", ddof=1).where(ob.notnull()).mean("x"))
    xr.testing.assert_allclose(got["spread"], expected)


def test_leave_one_out_on_real_era5(era5: xr.Dataset) -> None:
    t = era5["t"].rename(number="member").isel(time=[0, 3])
    got = leave_one_out_scores(t, dim=["time", "latitude", "longitude"])
    x = t.values.astype(np.float64)  # (member, time, level, lat, lon)
    crps = []
    for k in range(10):
        others = np.delete(x, k, axis=0)
        y = x[k]
        crps.append(
            np.abs(others - y).mean(0) - np.abs(others[:, None] - others[None, :]).mean((0, 1)) / 2
        )
    np.testing.assert_allclose(got["crps"], np.mean(crps, 0).mean((0, 2, 3)), rtol=1e-6)
    # the identity of the module docstring: corrected pooled ratio is exactly one
    ratio = got["spread"] / got["rmse"] * np.sqrt(10 / 9)
    np.testing.assert_allclose(ratio, 1.0, rtol=1e-9)
    with pytest.raises(ValueError, match="at least 3 members"):
        leave_one_out_scores(t.isel(member=[0, 1]))


def test_score_ensemble_against_observations_at_valid_time() -> None:
    """Observations indexed by valid time are taken at start + lead, never by start time."""
    from sciml.weather.verify import at_valid_time

    rng = np.random.default_rng(1)
    start = np.datetime64("2000-01-01", "ns") + np.arange(3) * np.timedelta64(1, "D")
    lead = np.arange(2) * np.timedelta64(1, "D")
    fc = xr.DataArray(
        rng.standard_normal((4, 3, 2, 5)),
        dims=("member", "time", "lead_time", "x"),
        coords={"time": start, "lead_time": lead},
    )
    days = np.datetime64("2000-01-01", "ns") + np.arange(4) * np.timedelta64(1, "D")
    obs = xr.DataArray(rng.standard_normal((4, 5)), dims=("time", "x"), coords={"time": days})
    picked = at_valid_time(obs, fc)
    assert picked.dims == ("time", "lead_time", "x")
    np.testing.assert_array_equal(picked.isel(time=1, lead_time=1), obs.isel(time=2))
    got = score_ensemble(fc.to_dataset(name="t"), "t", observations=obs.to_dataset(name="t"))
    expected = metrics.crps_ensemble(picked, fc, dim=["time", "x"])
    np.testing.assert_allclose(got["crps"], expected)
    with pytest.raises(ValueError, match="no value at 1 valid time"):
        at_valid_time(obs.isel(time=slice(0, 3)), fc)
    with pytest.raises(ValueError, match="missing \\['lead_time'\\]"):
        metrics.crps_ensemble(obs.isel(time=slice(0, 3)), fc)
