"""EMOS: known coefficients recovered, the scipy optimum of the same CRPS, the constraints."""

from pathlib import Path

import numpy as np
import pandas as pd
import properscoring as ps
import pytest
import scipy.optimize
import scipy.stats
import torch
import xarray as xr

from sciml.weather import metrics
from sciml.weather.postprocess import emos
from sciml.weather.postprocess.emos import (
    GRADIENT_TOLERANCE,
    _derivatives,
    emos_predict,
    fit_emos,
    pack_coefficients,
    unpack_coefficients,
)

TRUE = {"a": [0.5, -1.0, 2.0], "b": [0.8, 1.2, 0.3], "c": [0.3, 0.05, 1.0], "d": [1.5, 0.5, 2.0]}


def _synthetic(
    rng: np.random.Generator, coefficients: dict[str, list[float]], samples: int
) -> tuple[xr.DataArray, xr.DataArray]:
    """Ensembles whose truth is N(a + b mean, c + d var) at each of three points."""
    points = len(coefficients["a"])
    a, b, c, d = (np.asarray(coefficients[k])[:, None] for k in "abcd")
    centre = 3.0 * rng.standard_normal((points, samples))
    width = rng.uniform(0.3, 1.5, (points, samples))
    members = centre[None] + width[None] * rng.standard_normal((8, points, samples))
    mean, var = members.mean(0), members.var(0, ddof=1)
    truth = a + b * mean + np.sqrt(c + d * var) * rng.standard_normal((points, samples))
    coords = {"point": ["p0", "p1", "p2"][:points], "time": np.arange(samples)}
    forecasts = xr.DataArray(members, dims=("member", "point", "time"), coords=coords)
    observations = xr.DataArray(truth, dims=("point", "time"), coords=coords)
    return observations.assign_attrs(units="K"), forecasts.assign_attrs(units="K")


def _scipy_fit(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """The same minimum-CRPS problem by L-BFGS-B with bounds b, c, d >= 0 (reference)."""

    def loss(p: np.ndarray) -> float:
        sigma = np.sqrt(p[2] + p[3] * var)
        return float(ps.crps_gaussian(y, p[0] + p[1] * mean, sigma).mean())

    bounds = [(None, None), (0, None), (1e-9, None), (0, None)]
    start = np.array([y.mean(), 1.0, y.var() / 2, 1.0])
    return scipy.optimize.minimize(loss, start, bounds=bounds, method="L-BFGS-B", tol=1e-13).x


def test_per_point_fit_recovers_known_coefficients_and_the_scipy_optimum() -> None:
    observations, forecasts = _synthetic(np.random.default_rng(0), TRUE, samples=3000)
    fitted = fit_emos(observations, forecasts, dim="time")
    assert fitted["a"].dims == ("point",) and fitted["a"].attrs["units"] == "K"
    mean, var = forecasts.mean("member"), forecasts.var("member", ddof=1)
    for k, point in enumerate(fitted["point"].values):
        reference = _scipy_fit(
            observations.sel(point=point).values,
            mean.sel(point=point).values,
            var.sel(point=point).values,
        )
        got = [float(fitted[name].sel(point=point)) for name in "abcd"]
        # both minimise the same smooth function to ~1e-12: they agree to the optimisers'
        # tolerance, far below the sampling error
        np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)
        # sampling error of 3000 samples: a few percent of the coefficients' scale
        true = [TRUE[name][k] for name in "abcd"]
        np.testing.assert_allclose(got, true, rtol=0.15, atol=0.1)


def test_global_fit_pools_everything_and_constraints_hold() -> None:
    # the truth is anti-correlated with the ensemble mean: the best b >= 0 is 0
    observations, forecasts = _synthetic(
        np.random.default_rng(1), {"a": [0.0], "b": [-0.5], "c": [1.0], "d": [0.0]}, samples=2000
    )
    fitted = fit_emos(observations, forecasts)
    assert fitted["b"].dims == () and fitted.attrs["pooled_over"] == ["point", "time"]
    reference = _scipy_fit(
        observations.values.ravel(),
        forecasts.mean("member").values.ravel(),
        forecasts.var("member", ddof=1).values.ravel(),
    )
    assert reference[1] == 0.0  # the bound is active
    got = np.array([float(fitted[name]) for name in "abcd"])
    assert np.all(got[1:] >= 0)
    # squared parameters approach an active bound linearly: looser than the interior
    np.testing.assert_allclose(got, reference, atol=2e-3)


def test_prediction_improves_the_crps_of_a_biased_ensemble() -> None:
    rng = np.random.default_rng(2)
    observations, forecasts = _synthetic(rng, TRUE, samples=1500)
    train, test = {"time": slice(0, 1000)}, {"time": slice(1000, None)}
    fitted = fit_emos(observations.isel(train), forecasts.isel(train), dim="time")
    # coefficients on the points in another order are applied by label
    predicted = emos_predict(fitted.isel(point=[2, 0, 1]), forecasts.isel(test))
    emos = metrics.crps_gaussian(observations.isel(test), predicted["mu"], predicted["sigma"])
    raw = metrics.crps_ensemble(observations.isel(test), forecasts.isel(test))
    assert float(emos) < 0.9 * float(raw)
    assert predicted["sigma"].attrs["units"] == "K"


def test_bad_inputs_are_rejected() -> None:
    observations, forecasts = _synthetic(np.random.default_rng(3), TRUE, samples=50)
    with pytest.raises(ValueError, match="at least 2 member"):
        fit_emos(observations, forecasts.isel(member=[0]))
    with pytest.raises(ValueError, match="pools no samples"):
        fit_emos(observations, forecasts, dim=[])
    with pytest.raises(ValueError, match=r"dim \['lat'\] not among"):
        fit_emos(observations, forecasts, dim="lat")
    with pytest.raises(ValueError, match="'time' coordinates differ"):
        fit_emos(observations, forecasts.assign_coords(time=forecasts.time + 1), dim="time")
    empty = observations.where(observations.point != "p1")
    with pytest.raises(ValueError, match="1 of the 3 fits over \\['time'\\] have no valid"):
        fit_emos(empty, forecasts, dim="time")
    fitted = fit_emos(observations, forecasts, dim="time")
    with pytest.raises(ValueError, match="'point' coordinates differ"):
        emos_predict(fitted, forecasts.assign_coords(point=["x", "y", "z"]))
    with pytest.raises(ValueError, match=r"coefficients lack \['d'\]"):
        emos_predict(fitted.drop_vars("d"), forecasts)
    with pytest.raises(ValueError, match="coefficients has dimensions \\['lead'\\]"):
        emos_predict(fitted.expand_dims(lead=2), forecasts)
    with pytest.raises(TypeError, match="positional argument"):
        fit_emos(observations, forecasts, "member")  # type: ignore[misc]


def test_packed_fits_keep_each_variables_dims_and_round_trip_a_file(tmp_path: Path) -> None:
    observations, forecasts = _synthetic(np.random.default_rng(4), TRUE, samples=40)
    per_point = fit_emos(observations, forecasts, dim="time")
    one = fit_emos(observations, forecasts)  # no dims: a single fit
    path = tmp_path / "emos.nc"
    pack_coefficients({"t": per_point, "t2m": one}).to_netcdf(path)
    with xr.open_dataset(path) as stored:
        packed = stored.load()
    for var, fit in (("t", per_point), ("t2m", one)):
        back = unpack_coefficients(packed, var)
        assert set(back.data_vars) == set("abcd")
        for name in "abcd":
            assert back[name].dims == fit[name].dims  # nothing repeated along 'point'
            np.testing.assert_array_equal(back[name].values, fit[name].values)
    assert unpack_coefficients(packed, "t")["a"].attrs["long_name"] == "EMOS intercept of the mean"


def test_packing_refuses_what_it_cannot_store_and_unpacking_an_older_layout() -> None:
    observations, forecasts = _synthetic(np.random.default_rng(5), TRUE, samples=40)
    fit = fit_emos(observations, forecasts, dim="time")
    with pytest.raises(ValueError, match="no EMOS fit to pack"):
        pack_coefficients({})
    with pytest.raises(ValueError, match=r"the EMOS fit of 'q' lacks \['c'\]"):
        pack_coefficients({"q": fit.drop_vars("c")})
    other = fit.assign_coords(point=["x", "y", "z"])
    with pytest.raises(ValueError, match=r"fits of \['t', 'q'\] have other coordinates"):
        pack_coefficients({"t": fit, "q": other})
    packed = pack_coefficients({"t": fit})
    with pytest.raises(ValueError, match=r"no EMOS fit of 'q'; the coefficients hold \['t'\]"):
        unpack_coefficients(packed, "q")
    stacked = xr.concat([fit, fit], dim=pd.Index(["t", "q"], name="variable"))
    with pytest.raises(ValueError, match="not in the per-variable layout"):
        unpack_coefficients(stacked, "t")


def _standardised_fits(rng: np.random.Generator) -> tuple[xr.DataArray, xr.DataArray]:
    """Twelve fits whose ensembles differ as lead times do: spread 0.02 to 1, biased means.

    Each fit's truth has mean 0 and standard deviation 1, so the fit's own standardisation
    is the identity and its free parameters are those of the returned coefficients.
    """
    fits, samples = 12, 2000
    spread = np.geomspace(0.02, 1.0, fits)[:, None]
    signal = rng.standard_normal((fits, samples))
    members = 0.7 * signal + 0.3 + spread * rng.standard_normal((10, fits, samples))
    truth = signal + 0.5 * np.sqrt(np.linspace(0.01, 1, fits))[:, None] * rng.standard_normal(
        (fits, samples)
    )
    loc, scale = truth.mean(-1, keepdims=True), truth.std(-1, keepdims=True)
    coords = {"lead": np.arange(fits), "time": np.arange(samples)}
    observations = xr.DataArray((truth - loc) / scale, dims=("lead", "time"), coords=coords)
    dims = ("member", "lead", "time")
    forecasts = xr.DataArray((members - loc) / scale, dims=dims, coords=coords)
    return observations, forecasts


def test_every_fit_of_a_batch_is_stationary_by_the_closed_form_gradient() -> None:
    """The CRPS gradient of each fit, in closed form (numpy), vanishes at its coefficients.

    dCRPS/dmu = 1 - 2 Phi(z) and dCRPS/dsigma = 2 phi(z) - 1/sqrt(pi) (z = (y - mu)/sigma).
    A fit stops when each gradient component on the free parameters (a, sqrt b, sqrt c,
    sqrt d) is at most 1e-10 (dL/dsqrt(k) = 2 sqrt(k) dL/dk), up to the rounding of a mean
    of 2000 float64 terms of order one (2000 eps ~ 5e-13), or when no step lowers its
    loss: then the Newton step's decrease g' H^-1 g / 2 is below the loss's own rounding
    (2000 eps times the loss). Here the fits with the narrowest ensembles stop so, with
    gradients of 1e-9 whose steps would lower the loss by 1e-17, against 1e-14 of rounding.
    """
    observations, forecasts = _standardised_fits(np.random.default_rng(7))
    fitted = fit_emos(observations, forecasts, dim="time")
    y = observations.values
    mean, var = forecasts.mean("member").values, forecasts.var("member", ddof=1).values
    a, b, c, d = (fitted[k].values[:, None] for k in "abcd")
    mu, sigma = a + b * mean, np.sqrt(c + d * var + 1e-12)
    z = (y - mu) / sigma
    d_mu = 1 - 2 * scipy.stats.norm.cdf(z)
    d_sigma = 2 * scipy.stats.norm.pdf(z) - 1 / np.sqrt(np.pi)
    gradient = np.stack(
        [
            d_mu.mean(-1),
            (d_mu * mean).mean(-1) * 2 * np.sqrt(b[:, 0]),
            (d_sigma / (2 * sigma)).mean(-1) * 2 * np.sqrt(c[:, 0]),
            (d_sigma * var / (2 * sigma)).mean(-1) * 2 * np.sqrt(d[:, 0]),
        ],
        axis=-1,
    )
    rounding = y.shape[-1] * np.finfo(np.float64).eps
    free = torch.from_numpy(np.concatenate([a, np.sqrt(b), np.sqrt(c), np.sqrt(d)], axis=-1))
    data = (torch.from_numpy(x) for x in (y, mean, var, np.ones(y.shape, dtype=bool)))
    loss, _, hessian = _derivatives(free, *data)
    decrease = 0.5 * np.einsum(
        "gi,gi->g", gradient, np.linalg.solve(hessian.numpy(), gradient[..., None])[..., 0]
    )
    small = np.abs(gradient).max(-1) <= GRADIENT_TOLERANCE + rounding
    at_rounding = decrease <= rounding * loss.numpy()
    assert (small | at_rounding).all(), (gradient, decrease, loss)


def test_a_fit_does_not_depend_on_the_fits_beside_it() -> None:
    observations, forecasts = _standardised_fits(np.random.default_rng(8))
    together = fit_emos(observations, forecasts, dim="time")
    for lead in (0, 11):
        alone = fit_emos(observations.isel(lead=[lead]), forecasts.isel(lead=[lead]), dim="time")
        for k in "abcd":
            np.testing.assert_allclose(alone[k].values, together[k].values[[lead]], rtol=1e-6)


def test_a_fit_that_has_not_converged_is_an_error() -> None:
    observations, forecasts = _standardised_fits(np.random.default_rng(9))
    with pytest.raises(RuntimeError, match=r"12 of 12 EMOS fits still improve after 1 Newton"):
        fit_emos(observations, forecasts, dim="time", max_iter=1)


def test_a_fit_whose_loss_no_step_lowers_is_converged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fit at its optimum to rounding is converged though its gradient stays above the
    tolerance (a real sample's fit stopped at 7e-10): no step may count as progress unless
    it lowers the loss; one that only repeats it at rounding level would loop to max_iter.
    """
    monkeypatch.setattr(emos, "GRADIENT_TOLERANCE", 0.0)  # out of reach: only stalling ends
    observations, forecasts = _standardised_fits(np.random.default_rng(10))
    stalled = fit_emos(observations, forecasts, dim="time")
    monkeypatch.undo()
    converged = fit_emos(observations, forecasts, dim="time")
    for k in "abcd":  # some c sit on their bound 0, where both give ~1e-19
        np.testing.assert_allclose(stalled[k], converged[k], rtol=1e-6, atol=1e-12)
