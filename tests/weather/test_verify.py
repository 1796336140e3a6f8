"""Score summaries, leave-one-out scoring and scoring against observations at valid time."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import properscoring
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


def _forecasts_with_truth(rng: np.random.Generator) -> xr.Dataset:
    """5 members, 7 start dates, 2 lead times, 4 x 3 points; missing values and ties."""
    shape = (5, 7, 2, 4, 3)
    members = np.round(rng.standard_normal(shape) * 4) / 4  # ties with the truth
    truth = np.round(rng.standard_normal(shape[1:]) * 4) / 4
    members[rng.random(shape) < 0.05] = np.nan
    truth[rng.random(shape[1:]) < 0.05] = np.nan
    dims = ("member", "time", "lead_time", "lat", "lon")
    coords = {
        "time": np.datetime64("2000-01-01", "ns") + np.arange(7) * np.timedelta64(1, "D"),
        "lead_time": np.arange(2) * np.timedelta64(1, "D"),
        "lat": [-40.0, 0.0, 30.0, 60.0],
    }
    return xr.Dataset(
        {"t": (dims, members, {"units": "K"}), "t_truth": (dims[1:], truth, {"units": "K"})},
        coords=coords,
    )


@pytest.mark.parametrize("block", [1, 3, 100])
@pytest.mark.parametrize("against", ["truth", "observations", "members"])
@pytest.mark.parametrize(("by", "lat_weights"), [(None, False), (None, True), (["time"], True)])
def test_blocks_of_dates_score_as_the_whole_data(
    block: int, against: str, by: list[str] | None, lat_weights: bool
) -> None:
    """Each score's weighted sums over the blocks: the whole data's, to summation rounding."""
    rng = np.random.default_rng(5)
    data = _forecasts_with_truth(rng)
    observations = None
    if against == "observations":  # by valid time: 8 days
        days = np.datetime64("2000-01-01", "ns") + np.arange(8) * np.timedelta64(1, "D")
        values = rng.standard_normal((8, 4, 3))
        observations = xr.Dataset(
            {"t": (("time", "lat", "lon"), values, {"units": "K"})},
            coords={"time": days, "lat": data["lat"]},
        )
    if against == "members":
        data = data.drop_vars("t_truth")
    kwargs = {"observations": observations, "by": by, "lat_weights": lat_weights, "missing": "mask"}
    whole = score_ensemble(data, "t", block_dates=0, **kwargs)
    blocks = score_ensemble(data, "t", block_dates=block, **kwargs)
    assert blocks.attrs == whole.attrs
    assert list(blocks.data_vars) == list(whole.data_vars)
    for name, expected in whole.data_vars.items():
        got = blocks[name]
        assert got.dims == expected.dims, name
        xr.testing.assert_equal(got.isnull(), expected.isnull())
        np.testing.assert_allclose(got, expected, rtol=1e-12, err_msg=name)
    assert whole["crps"].notnull().any()


@pytest.mark.parametrize("block", [0, 2])
@pytest.mark.parametrize("where", ["t", "t_truth", "observations"])
def test_missing_values_are_refused_or_left_out_as_asked(
    where: str, block: int, tmp_path: Path
) -> None:
    rng = np.random.default_rng(8)
    data = _forecasts_with_truth(rng).fillna(0.5)
    observations = None
    if where == "observations":
        observations = data[["t_truth"]].rename(t_truth="t")
        observations["t"][3, 1, 2, 0] = np.nan
        observations.to_netcdf(tmp_path / "obs.nc")
        observations = xr.open_dataset(tmp_path / "obs.nc")
        data = data.drop_vars("t_truth")
    else:
        index = (1, 3, 1, 2, 0) if where == "t" else (3, 1, 2, 0)
        data[where][index] = np.nan
    data.to_netcdf(tmp_path / "data.nc")
    data = xr.open_dataset(tmp_path / "data.nc")
    before = data.copy(deep=True)
    file = "obs.nc" if where == "observations" else "data.nc"
    with pytest.raises(
        ValueError, match=rf"missing \(NaN\) values in .*{file}.*1 of .*--missing mask"
    ):
        score_ensemble(data, "t", observations=observations, block_dates=block)
    masked = score_ensemble(data, "t", observations=observations, block_dates=block, missing="mask")
    xr.testing.assert_identical(data, before)
    # left out: the mean over the points with a verifying value of properscoring's CRPS,
    # which scores the members present
    truth = observations["t"] if observations is not None else data["t_truth"]
    crps = properscoring.crps_ensemble(truth.values, np.moveaxis(data["t"].values, 0, -1))
    crps[np.isnan(truth.values)] = np.nan
    expected = np.nanmean(crps.transpose(1, 0, 2, 3).reshape(2, -1), axis=1)
    np.testing.assert_allclose(masked["crps"], expected, rtol=1e-12)


_PEAK = """
import sys, tracemalloc
from pathlib import Path
import numpy as np, xarray as xr
from sciml.weather.verify import score_ensemble

def ensemble(dates):
    rng = np.random.default_rng(dates)
    shape = (10, dates, 2, 24, 48)
    dims = ("member", "time", "lead_time", "lat", "lon")
    coords = {
        "time": np.datetime64("2000-01-01") + np.arange(dates) * np.timedelta64(1, "D"),
        "lead_time": np.arange(2) * np.timedelta64(1, "D"),
        "lat": np.linspace(-60, 60, 24),
    }
    members = rng.standard_normal(shape, dtype=np.float32)
    truth = rng.standard_normal(shape[1:], dtype=np.float32)
    data = {"t": (dims, members, {"units": "K"}), "t_truth": (dims[1:], truth, {"units": "K"})}
    return xr.Dataset(data, coords=coords)

peaks = []
for dates in (6, 24):
    path = Path(sys.argv[1]) / f"{dates}.nc"
    ensemble(dates).to_netcdf(path)
    with xr.open_dataset(path, chunks={}) as data:  # one Dask chunk: the whole file
        for observations in (True, False):
            data = data if observations else data.drop_vars("t_truth")
            score_ensemble(data, "t", block_dates=2, lat_weights=True)  # imports, caches
            tracemalloc.start()
            score_ensemble(data, "t", block_dates=2, lat_weights=True)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
print(*peaks)
"""


def test_peak_memory_follows_the_block_not_the_file(tmp_path: Path) -> None:
    """Against the truth and member against members: 4x the dates, about the same peak.

    Measured in a fresh interpreter (tracemalloc counts every thread of its process).
    """
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    truth, members, truth4, members4 = map(int, done.stdout.split())
    assert truth4 < 1.3 * truth, f"peaks {truth / 1e6:.2f} and {truth4 / 1e6:.2f} MB"
    assert members4 < 1.3 * members, f"peaks {members / 1e6:.2f} and {members4 / 1e6:.2f} MB"
