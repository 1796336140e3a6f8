"""``members_as_truth`` and ``leave_one_date_out`` on a tiny analysis-like ensemble."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from sciml.weather import metrics
from sciml.weather.crossval import leave_one_date_out, members_as_truth
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.emos import fit_emos, unpack_coefficients
from sciml.weather.verify import leave_one_out_scores

#: The folds' model: EMOS on the first 2 members.
EMOS = PostprocessConfig(model="emos", members=2)


def _analyses(*, members: int = 4, dates: int = 4) -> xr.Dataset:
    """A ``(member, time, level, lat, lon)`` ensemble without lead time, like the ERA5 sample."""
    rng = np.random.default_rng(3)
    dims = ("member", "time", "level", "lat", "lon")
    shape = (members, dates, 2, 3, 4)
    coords = {
        "member": np.arange(members) + 10,
        "time": np.datetime64("2017-01-01") + np.arange(dates) * np.timedelta64(12, "h"),
        "level": [850.0, 500.0],
        "lat": [30.0, 0.0, -30.0],
        "lon": np.arange(4) * 90.0,
    }
    signal = rng.standard_normal(shape[1:])
    field = signal + 0.4 * rng.standard_normal(shape)
    return xr.Dataset({"t": (dims, field, {"units": "K"})}, coords=coords)


def test_each_member_is_the_truth_of_the_others_once() -> None:
    ds = _analyses()
    out = members_as_truth(ds)
    assert out["t"].dims == ("member", "time", "lead_time", "truth_member", "level", "lat", "lon")
    assert out["lead_time"].values.tolist() == [np.timedelta64(0, "ns")]
    assert out["truth_member"].values.tolist() == [10, 11, 12, 13]
    assert out["t"].attrs["units"] == out["t_truth"].attrs["units"] == "K"
    one = out.isel(lead_time=0, drop=True).sel(truth_member=12, drop=True)
    np.testing.assert_array_equal(one["t_truth"], ds["t"].sel(member=12, drop=True))
    np.testing.assert_array_equal(one["t"], ds["t"].sel(member=[10, 11, 13]))
    # the pooled CRPS is the leave-one-out CRPS of the raw ensemble
    pooled = metrics.crps_ensemble(out["t_truth"], out["t"], dim=None)
    reference = leave_one_out_scores(ds["t"], dim=None)["crps"]
    assert float(pooled) == pytest.approx(float(reference), rel=1e-12)


def test_members_as_truth_refuses_what_it_cannot_verify() -> None:
    ds = _analyses()
    with pytest.raises(ValueError, match="at least 3 members"):
        members_as_truth(ds.isel(member=[0, 1]))
    with pytest.raises(ValueError, match="no variable 'q'"):
        members_as_truth(ds, variables=["q"])
    with pytest.raises(ValueError, match=r"'t' already has a truth \(t_truth\)"):
        members_as_truth(ds.assign(t_truth=ds["t"].isel(member=0, drop=True)), variables=["t"])
    with pytest.raises(ValueError, match="already has a 'level' dimension"):
        members_as_truth(ds, truth_dim="level")
    with pytest.raises(ValueError, match=r"has no \['time'\] dimension"):
        members_as_truth(ds.isel(time=0, drop=True))
    with pytest.raises(ValueError, match="no variable with a member dimension"):
        members_as_truth(ds.rename(member="number"))


def test_each_date_is_scored_by_a_fit_on_the_other_dates(tmp_path: Path) -> None:
    data = members_as_truth(_analyses())
    table = leave_one_date_out(data, EMOS, tmp_path)
    dates = data["time"].values
    assert set(table.model) == {"raw_3", "raw_2", "emos_2"}
    # one row per model, level and held-out date
    counts = table.groupby(["model", "held_out"]).size()
    assert len(counts) == 3 * len(dates) and (counts == 2).all()
    assert set(table.held_out) == set(dates)
    for i, held in enumerate(dates):
        # the fold fits EMOS on every other date
        seen = [d for d in dates if d != held]
        train = data.sel(time=seen)
        expected = fit_emos(
            train["t_truth"],
            train["t"].isel(member=slice(2)),
            dim=["time", "truth_member", "lat", "lon"],
        )
        with xr.open_dataset(tmp_path / f"date{i}" / "emos.nc") as stored:
            fitted = unpack_coefficients(stored.load(), "t")
        for name in "abcd":
            np.testing.assert_allclose(
                fitted[name].transpose(*expected[name].dims),
                expected[name],
                rtol=1e-12,
            )


def test_leave_one_date_out_needs_three_distinct_dates(tmp_path: Path) -> None:
    data = members_as_truth(_analyses(dates=3))
    with pytest.raises(ValueError, match="at least 3 start dates"):
        leave_one_date_out(data.isel(time=[0, 1]), EMOS, tmp_path)
    with pytest.raises(ValueError, match="start dates repeat"):
        leave_one_date_out(data.isel(time=[0, 1, 1]), EMOS, tmp_path)
    with pytest.raises(ValueError, match="no start-date dimension 'time'"):
        leave_one_date_out(data.isel(time=0, drop=True), EMOS, tmp_path)
