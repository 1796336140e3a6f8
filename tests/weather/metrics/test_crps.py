"""Metrics against properscoring, xskillscore, scoringrules, closed forms and direct numpy."""

import numpy as np
import properscoring as ps
import pytest
import scipy.stats
import scoringrules as sr
import xarray as xr
import xskillscore as xs

from sciml.weather import metrics as m
from tests.weather.conftest import pairwise_crps, random_fields

RTOL = 1e-6


@pytest.mark.parametrize("members", [1, 2, 5, 50])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("nans", [False, True])
def test_crps_matches_properscoring_per_point(members: int, ties: bool, nans: bool) -> None:
    rng = np.random.default_rng(members)
    ob, fc = random_fields(rng, members, ties=ties, nans=nans)
    got = m.crps_ensemble(ob, fc, dim=[])
    ref = ps.crps_ensemble(ob.values, fc.transpose(..., "member").values)
    assert got.dims == ob.dims
    np.testing.assert_allclose(got.values, ref, rtol=RTOL, atol=1e-12)
    np.testing.assert_allclose(
        got.values, pairwise_crps(ob.values, np.moveaxis(fc.values, 0, -1)), rtol=RTOL, atol=1e-12
    )


@pytest.mark.parametrize("dim", [None, [], "time", ["lat", "lon"], ["time", "lat", "lon"]])
@pytest.mark.parametrize("weighted", [False, True])
def test_crps_dim_and_weights_match_xskillscore(
    dim: str | list[str] | None, weighted: bool
) -> None:
    ob, fc = random_fields(np.random.default_rng(3), 6, nans=True)
    weights = m.latitude_weights(ob) if weighted else None
    if weighted and dim is not None and "lat" not in dim:
        with pytest.raises(ValueError, match=r"weights have dimensions \['lat'\]"):
            m.crps_ensemble(ob, fc, dim=dim, weights=weights)
        return
    got = m.crps_ensemble(ob, fc, dim=dim, weights=weights)
    ref = xs.crps_ensemble(ob, fc, dim=dim, weights=weights)
    assert set(got.dims) == set(ref.dims)
    xr.testing.assert_allclose(got, ref.transpose(*got.dims), rtol=RTOL)


def test_fair_crps_matches_scoringrules_and_pairwise() -> None:
    rng = np.random.default_rng(4)
    ob, fc = random_fields(rng, 9, ties=True)
    got = m.crps_ensemble(ob, fc, dim=[], fair=True)
    ens = fc.transpose(..., "member").values
    np.testing.assert_allclose(got, sr.crps_ensemble(ob.values, ens, estimator="fair"), rtol=RTOL)
    ob, fc = random_fields(rng, 4, nans=True)
    got = m.crps_ensemble(ob, fc, dim=[], fair=True)
    ens = fc.transpose(..., "member").values
    np.testing.assert_allclose(got, pairwise_crps(ob.values, ens, fair=True), rtol=RTOL)


def test_crps_is_lazy_on_dask_and_keeps_attrs() -> None:
    ob, fc = random_fields(np.random.default_rng(8), 5, nans=True)
    lazy_ob, lazy_fc = ob.chunk({"time": 2}), fc.chunk({"time": 1, "member": 2})
    for dim, weights in (([], None), (["lat"], m.latitude_weights(ob))):
        got = m.crps_ensemble(lazy_ob, lazy_fc, dim=dim, weights=weights)
        assert got.chunks is not None
        xr.testing.assert_allclose(got.compute(), m.crps_ensemble(ob, fc, dim=dim, weights=weights))
    assert m.crps_ensemble(lazy_ob, lazy_fc, dim=[]).attrs["units"] == "K"
    for lazy in (
        m.crps_gaussian(lazy_ob, lazy_fc.mean("member"), lazy_fc.std("member"), dim=[]),
        m.rank_histogram(lazy_ob, lazy_fc, dim=["lat", "lon"]),
        m.spread_skill_ratio(lazy_ob, lazy_fc, dim=["lat"]),
        m.twcrps_ensemble(lazy_ob, lazy_fc, dim=[], a=0.5),
    ):
        assert lazy.chunks is not None


def test_crps_on_datasets() -> None:
    ob, fc = random_fields(np.random.default_rng(9), 4)
    got = m.crps_ensemble(ob.to_dataset(name="t"), fc.to_dataset(name="t"), dim="time")
    xr.testing.assert_allclose(got["t"], xs.crps_ensemble(ob, fc, dim="time"), rtol=RTOL)


@pytest.mark.parametrize("fair", [False, True])
def test_twcrps_matches_scoringrules(fair: bool) -> None:
    ob, fc = random_fields(np.random.default_rng(10), 8)
    ens = fc.transpose(..., "member").values
    est = "fair" if fair else "nrg"
    got = m.twcrps_ensemble(ob, fc, dim=[], a=0.3, fair=fair)
    np.testing.assert_allclose(
        got, sr.twcrps_ensemble(ob.values, ens, 0.3, estimator=est), rtol=RTOL, atol=1e-12
    )
    got = m.twcrps_ensemble(ob, fc, dim=[], a=-1.0, b=0.5, fair=fair)
    ref = sr.twcrps_ensemble(ob.values, ens, -1.0, 0.5, estimator=est)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=1e-12)
    got = m.twcrps_ensemble(ob, fc, dim=[], v_func=np.tanh, fair=fair)
    ref = sr.twcrps_ensemble(ob.values, ens, v_func=np.tanh, estimator=est)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=1e-12)
    with pytest.raises(ValueError, match="a < b"):
        m.twcrps_ensemble(ob, fc, a=1.0, b=0.0)


def test_crps_gaussian_matches_properscoring_and_limits() -> None:
    rng = np.random.default_rng(11)
    ob, fc = random_fields(rng, 6, nans=True)
    mu, sigma = fc.mean("member"), fc.std("member") + 0.1
    got = m.crps_gaussian(ob, mu, sigma, dim=[])
    np.testing.assert_allclose(got, ps.crps_gaussian(ob.values, mu.values, sigma.values), rtol=RTOL)
    xr.testing.assert_allclose(
        m.crps_gaussian(ob, mu, sigma, dim="lat", weights=m.latitude_weights(ob)),
        xs.crps_gaussian(ob, mu, sigma, dim="lat", weights=m.latitude_weights(ob)),
        rtol=RTOL,
    )
    zero = m.crps_gaussian(ob, mu, 0.0, dim=[])
    np.testing.assert_allclose(zero, np.abs(ob - mu), rtol=RTOL)
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        m.crps_gaussian(ob, mu, -1.0, dim=[])
    # the CRPS of a large ensemble of normal quantiles approaches the closed form
    levels = (np.arange(20_000) + 0.5) / 20_000
    big = xr.DataArray(scipy.stats.norm.ppf(levels, 0.3, 1.7)[:, None], dims=("member", "x"))
    y = xr.DataArray([1.1], dims="x")
    assert float(m.crps_ensemble(y, big)) == pytest.approx(
        float(m.crps_gaussian(y, 0.3, 1.7)), rel=1e-4
    )


def test_efi_weighted_crps() -> None:
    rng = np.random.default_rng(13)
    ob, fc = random_fields(rng, 5)
    climate = xr.DataArray(rng.standard_normal((30, 6)), dims=("climate", "lat"))
    efi = m.extreme_forecast_index(fc + 1.0, climate)
    assert efi.dims == ("time", "lat", "lon") and float(efi.mean()) > 0.3
    lazy = m.extreme_forecast_index(fc.chunk({"member": 1}), climate.chunk({"climate": 10}))
    assert lazy.chunks is not None
    xr.testing.assert_allclose(lazy.compute(), m.extreme_forecast_index(fc, climate))
    got = m.crps_ensemble_efi_weighted(ob, fc, efi, dim=[])
    xr.testing.assert_allclose(got, abs(efi) * m.crps_ensemble(ob, fc, dim=[]))
    with pytest.raises(ValueError, match="climate"):
        m.extreme_forecast_index(fc, climate.rename(climate="year"))


def test_crps_skill_score() -> None:
    ob, fc = random_fields(np.random.default_rng(17), 6)
    assert float(m.crps_skill_score(ob, fc, fc)) == pytest.approx(0.0, abs=1e-12)
    ref = fc.rename(member="number") * 2
    got = m.crps_skill_score(ob, fc, ref, dim="time", reference_member_dim="number")
    expected = 1 - m.crps_ensemble(ob, fc, dim="time") / m.crps_ensemble(
        ob, ref, member_dim="number", dim="time"
    )
    xr.testing.assert_allclose(got, expected)


def test_latitude_weights() -> None:
    lat = xr.DataArray(np.linspace(-90, 90, 7), dims="lat", name="lat")
    w = m.latitude_weights(lat)
    assert float(w.mean()) == pytest.approx(1.0)
    np.testing.assert_allclose(w / w.max(), np.cos(np.deg2rad(lat)), atol=1e-12)
    field = xr.Dataset(coords={"lat": lat.values})
    xr.testing.assert_allclose(m.latitude_weights(field), w)
    with pytest.raises(ValueError, match="latitude"):
        m.latitude_weights(xr.Dataset(coords={"y": [1.0]}))
    with pytest.raises(ValueError, match=r"\[-90, 90\]"):
        m.latitude_weights(xr.DataArray([100.0], dims="lat", name="lat"))


def test_clear_errors_for_member_dimension() -> None:
    ob, fc = random_fields(np.random.default_rng(18), 3)
    with pytest.raises(ValueError, match="no member dimension 'number'"):
        m.crps_ensemble(ob, fc, member_dim="number")
    with pytest.raises(ValueError, match="observations must not have"):
        m.crps_ensemble(fc, fc)
    with pytest.raises(TypeError, match="forecasts must be an xarray"):
        m.crps_ensemble(ob, fc.values)


def test_real_era5_each_member_against_the_others(era5: xr.Dataset) -> None:
    z = era5["z"].rename(number="member")
    M = z.sizes["member"]
    for k in (0, 7):
        obs, ens = z.isel(member=k), z.drop_isel(member=k)
        got = m.crps_ensemble(obs, ens, dim=[])
        x = np.moveaxis(ens.values.astype(np.float64), 0, -1)
        y = obs.values.astype(np.float64)
        direct = (
            np.abs(x - y[..., None]).mean(-1)
            - np.abs(x[..., :, None] - x[..., None, :]).mean((-1, -2)) / 2
        )
        np.testing.assert_allclose(got, direct, rtol=RTOL, atol=1e-9 * float(np.abs(y).max()))
        below = (x < y[..., None]).sum(-1)
        tied = (x == y[..., None]).any(-1)
        untied = xr.DataArray(~tied, dims=obs.dims)
        hist = m.rank_histogram(obs.where(untied), ens)
        np.testing.assert_array_equal(hist.values, np.bincount(below[~tied], minlength=M))
        assert int(m.rank_histogram(obs, ens).sum()) == y.size
    spread = m.ensemble_spread(z, dim=["latitude", "longitude"])
    direct = np.sqrt(np.var(z.values.astype(np.float64), 0, ddof=1).mean((-1, -2)))
    np.testing.assert_allclose(spread, direct, rtol=RTOL)


def _toy_pair(rng: np.random.Generator, members: int = 4) -> tuple[xr.DataArray, xr.DataArray]:
    """Forecasts and truth as the toy generator labels them (psi / psi_truth)."""
    ob, fc = random_fields(rng, members)
    fc.attrs = {"long_name": "streamfunction", "units": "K", "standard_name": "x"}
    ob.attrs = {"long_name": "true streamfunction", "units": "K"}
    return ob.rename("psi_truth"), fc.rename("psi")


@pytest.mark.parametrize("lazy", [False, True])
def test_every_output_is_named_and_labelled(lazy: bool) -> None:
    ob, fc = _toy_pair(np.random.default_rng(30))
    if lazy:
        ob, fc = ob.chunk({"time": 2}), fc.chunk({"time": 2})
    climate = xr.DataArray(np.zeros((5, 6)), dims=("climate", "lat"), coords={"lat": ob["lat"]})
    efi = m.extreme_forecast_index(fc, climate)
    outputs = {
        "crps": (m.crps_ensemble(ob, fc, dim="lat"), "K", "CRPS of streamfunction"),
        "crps_fair": (m.crps_ensemble(ob, fc, fair=True), "K", "fair CRPS of streamfunction"),
        "twcrps": (m.twcrps_ensemble(ob, fc, a=0.0), "K", "threshold-weighted CRPS of"),
        "rmse": (m.ensemble_mean_rmse(ob, fc, dim=[]), "K", "RMSE of the ensemble mean of"),
        "spread": (m.ensemble_spread(fc), "K", "ensemble spread of streamfunction"),
        "spread_skill": (m.spread_skill_ratio(ob, fc), "1", "spread-skill ratio"),
        "crps_skill_score": (m.crps_skill_score(ob, fc, fc * 2), "1", "CRPS skill score"),
        "rank_histogram": (m.rank_histogram(ob, fc), "count", "rank histogram of true"),
        "efi": (efi, "1", "extreme forecast index of streamfunction"),
        "crps_efi": (m.crps_ensemble_efi_weighted(ob, fc, efi), "K", "EFI-weighted CRPS"),
    }
    gaussian = m.crps_gaussian(ob, fc.mean("member"), fc.std("member"), dim=[])
    outputs["crps_gaussian"] = (gaussian.rename("crps_gaussian"), "K", "Gaussian CRPS of true")
    for name, (out, units, long_name) in outputs.items():
        assert out.name == name or name == "crps_gaussian", (name, out.name)
        assert out.attrs["units"] == units, name
        assert out.attrs["long_name"].startswith(long_name), (name, out.attrs)
        assert "standard_name" not in out.attrs, name
        assert (out.chunks is not None) == lazy, name
    assert gaussian.name == "crps"
    # Datasets keep their variable names; each variable is described by its own attributes
    got = m.crps_ensemble(ob.to_dataset(name="t"), fc.to_dataset(name="t"), dim="time")
    assert list(got.data_vars) == ["t"]
    assert got["t"].attrs == {"long_name": "CRPS of streamfunction", "units": "K"}
    ratio = m.spread_skill_ratio(ob.to_dataset(name="t"), fc.to_dataset(name="t"))
    assert ratio["t"].attrs["units"] == "1"


def test_inputs_on_other_coordinates_are_aligned_by_label_or_rejected() -> None:
    ob, fc = random_fields(np.random.default_rng(31), 5)
    ob = ob.assign_coords(lon=np.arange(5.0))
    fc = fc.assign_coords(lon=np.arange(5.0))
    expected = m.crps_ensemble(ob, fc, dim=[])
    # the same labels in another order: aligned by label
    flipped = fc.isel(lat=slice(None, None, -1))
    xr.testing.assert_allclose(m.crps_ensemble(ob, flipped, dim=[]), expected)
    xr.testing.assert_allclose(
        m.spread_skill_ratio(ob, flipped, dim="time"), m.spread_skill_ratio(ob, fc, dim="time")
    )
    # another grid, other dates, a partial overlap: an error naming both sides
    shifted = fc.assign_coords(lon=fc["lon"] + 0.5)
    for metric in (m.crps_ensemble, m.ensemble_mean_rmse, m.rank_histogram, m.spread_skill_ratio):
        with pytest.raises(ValueError, match="'lon' coordinates differ: observations have"):
            metric(ob, shifted)
    with pytest.raises(ValueError, match="'time' coordinates differ"):
        m.crps_ensemble(ob.isel(time=[0, 1]), fc.isel(time=[1, 2]))
    with pytest.raises(ValueError, match="'time' coordinates differ"):
        m.ensemble_mean_rmse(ob.isel(time=[0, 1]), fc.isel(time=[0, 1, 2]))
    # unlabelled dimensions of different sizes
    with pytest.raises(ValueError, match="dimension 'lon' has size"):
        m.crps_ensemble(ob.drop_vars("lon").isel(lon=[0, 1]), fc.drop_vars("lon"))
    # a missing or extra dimension is never broadcast
    with pytest.raises(ValueError, match=r"missing \['time'\]"):
        m.crps_ensemble(ob.isel(time=0, drop=True), fc)
    with pytest.raises(ValueError, match=r"extra \['time'\]"):
        m.ensemble_mean_rmse(ob, fc.isel(time=0, drop=True))
    # another level (a scalar coordinate) or other valid times: rejected
    with pytest.raises(ValueError, match="coordinate 'level' differs"):
        m.crps_ensemble(ob.assign_coords(level=850), fc.assign_coords(level=500))
    valid = xr.DataArray(np.arange(4) + 10, dims="time")
    with pytest.raises(ValueError, match="coordinate 'valid_time' differs"):
        m.crps_ensemble(ob.assign_coords(valid_time=valid), fc.assign_coords(valid_time=valid + 1))
    with pytest.raises(ValueError, match="units differ"):
        m.crps_ensemble(ob, fc.assign_attrs(units="degC"))


def test_dim_weights_and_members_are_checked() -> None:
    ob, fc = random_fields(np.random.default_rng(32), 5)
    w = m.latitude_weights(ob)
    for bad_dim in ("height", ["lat", "height"], "member"):
        with pytest.raises(ValueError, match="not among the score's dimensions"):
            m.crps_ensemble(ob, fc, dim=bad_dim)
    with pytest.raises(ValueError, match="not among the score's dimensions"):
        m.rank_histogram(ob, fc, dim="height")
    with pytest.raises(ValueError, match=r"weights have dimensions \['lat'\]"):
        m.crps_ensemble(ob, fc, dim="time", weights=w)
    with pytest.raises(ValueError, match=r"weights have dimensions \['lat'\]"):
        m.ensemble_spread(fc, dim=[], weights=w)
    with pytest.raises(ValueError, match="'lat' coordinates differ"):
        m.crps_ensemble(ob, fc, weights=w.assign_coords(lat=w["lat"] + 1))
    with pytest.raises(ValueError, match="dimension 'lat' has size"):
        m.crps_ensemble(ob, fc, weights=xr.DataArray(np.ones(3), dims="lat"))
    for bad in (-1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="finite and non-negative"):
            m.crps_ensemble(ob, fc, weights=w.where(w.lat != w.lat[0], bad))
    with pytest.raises(ValueError, match="all zero"):
        m.crps_ensemble(ob, fc, weights=w * 0)
    with pytest.raises(TypeError, match="weights must be an xarray"):
        m.crps_ensemble(ob, fc, weights=w.values)
    # weights in another order are aligned by label
    xr.testing.assert_allclose(
        m.crps_ensemble(ob, fc, dim="lat", weights=w.isel(lat=slice(None, None, -1))),
        m.crps_ensemble(ob, fc, dim="lat", weights=w),
    )
    one = fc.isel(member=[0])
    np.testing.assert_allclose(m.crps_ensemble(ob, one, dim=[]), abs(one.squeeze() - ob))
    for metric in (
        lambda: m.crps_ensemble(ob, one, fair=True),
        lambda: m.twcrps_ensemble(ob, one, a=0.0, fair=True),
        lambda: m.ensemble_spread(one),
        lambda: m.spread_skill_ratio(ob, one),
    ):
        with pytest.raises(ValueError, match="at least 2 member"):
            metric()
    with pytest.raises(ValueError, match="at least 1 member"):
        m.crps_ensemble(ob, fc.isel(member=[]))


def test_crps_gaussian_parameters_are_checked() -> None:
    ob, fc = random_fields(np.random.default_rng(33), 5)
    mu, sigma = fc.mean("member"), fc.std("member")
    # sigma constant over time: its dimensions are among the observations'
    got = m.crps_gaussian(ob, mu, sigma.isel(time=0, drop=True), dim=[])
    ref = ps.crps_gaussian(ob.values, mu.values, sigma.isel(time=0).values[None])
    np.testing.assert_allclose(got, ref, rtol=RTOL)
    with pytest.raises(ValueError, match=r"mu has dimensions \['member'\]"):
        m.crps_gaussian(ob.isel(time=0, drop=True), fc.isel(time=0, drop=True), 1.0)
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        m.crps_gaussian(ob, mu, -sigma)
    lazy = m.crps_gaussian(ob.chunk({"time": 1}), mu, -sigma, dim=[])  # raised on compute
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        lazy.compute()
    # a NaN parameter gives NaN at that point only
    nan_sigma = sigma.where(sigma.time != 0)
    got = m.crps_gaussian(ob, mu, nan_sigma, dim=[])
    assert got.isel(time=0).isnull().all() and got.isel(time=slice(1, None)).notnull().all()
    with pytest.raises(ValueError, match="'lat' coordinates differ"):
        m.crps_gaussian(ob, mu.assign_coords(lat=mu["lat"] + 1), sigma)
    with pytest.raises(TypeError, match="sigma must be a number or an xarray"):
        m.crps_gaussian(ob, mu, sigma.values)
    with pytest.raises(TypeError, match="observations must be an xarray"):
        m.crps_gaussian(ob.values, 0.0, 1.0)


def test_latitude_weights_reject_nan_latitudes() -> None:
    with pytest.raises(ValueError, match="finite"):
        m.latitude_weights(xr.DataArray([10.0, np.nan], dims="lat", name="lat"))


def test_nan_policy_skips_invalid_points_like_xskillscore() -> None:
    ob, fc = random_fields(np.random.default_rng(34), 6, nans=True)
    for dim in (None, "time", ["lat", "lon"]):
        for ours, theirs in (
            (m.crps_ensemble, xs.crps_ensemble),
            (m.ensemble_mean_rmse, None),
        ):
            got = ours(ob, fc, dim=dim)
            if theirs is not None:
                ref = theirs(ob, fc, dim=dim)
                xr.testing.assert_allclose(got, ref.transpose(*got.dims), rtol=RTOL)
        per_point = m.crps_ensemble(ob, fc, dim=[])
        assert (
            per_point.isnull().sum()
            == ob.isnull().sum()
            + (fc.notnull().sum("member") == 0).where(ob.notnull(), False).sum()
        )


def test_options_cannot_be_given_by_position() -> None:
    ob, fc = random_fields(np.random.default_rng(0))
    with pytest.raises(TypeError, match="positional argument"):
        m.crps_ensemble(ob, fc, "member", [], True)  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional argument"):
        m.crps_gaussian(ob, 0.0, 1.0, [])  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional argument"):
        m.spread_skill_ratio(ob, fc, "member")  # type: ignore[misc]
