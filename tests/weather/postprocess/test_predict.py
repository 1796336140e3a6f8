"""predict_run: a deep run's forecast on new data, by label and in the data's units."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr
from scipy.stats import norm

from sciml.training import TrainConfig
from sciml.weather.dataset import EnsembleDataset
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.emos import unpack_coefficients
from sciml.weather.postprocess.predict import combine_seeds, load_postprocessor, predict_run
from sciml.weather.postprocess.record import read_run
from sciml.weather.postprocess.train import train_postprocessor
from tests.weather.postprocess.test_evaluate import _ensemble, _with_surface
from tests.weather.postprocess.test_train_evaluate import _write


@pytest.mark.parametrize("model", ["mlp", "pooled"])
def test_the_forecast_is_the_model_on_each_sample_with_its_lead_time(
    tmp_path: Path, model: str
) -> None:
    train = xr.open_dataset(_write(tmp_path / "train.nc", dates=6, seed=0))
    test = xr.open_dataset(_write(tmp_path / "test.nc", dates=2, seed=1))
    run = tmp_path / model
    train_postprocessor(
        train,
        PostprocessConfig(
            model=model, members=3, train=TrainConfig(epochs=1, progress=False, tensorboard=False)
        ),
        run,
    )
    forecast = predict_run(run, test)
    mu, sigma = forecast["q"]
    assert mu.dims == sigma.dims == test["q_truth"].dims
    assert mu.indexes["time"].equals(test.indexes["time"])
    # sample (time 1, lead 1 day) by hand: the first 3 members, the lead time in days
    config, stats = read_run(run)
    data = EnsembleDataset(
        test, list(config.variables), members=3, stats=stats, static=config.static
    )
    sample = data[3]
    assert float(sample["lead_time"]) == 1.0
    with torch.no_grad():
        mu_n, sigma_n = load_postprocessor(run)(
            sample["members"][None], sample["static"][None], sample["lead_time"][None]
        )
    mean, std = np.array(stats.mean), np.array(stats.std)
    # q is channels 2, 3 (levels 1, 2); float32 model outputs scaled in float64
    expected_mu = mu_n[0, 2:].double().numpy() * std[2:, None, None] + mean[2:, None, None]
    expected_sigma = sigma_n[0, 2:].double().numpy() * std[2:, None, None]
    # a batch of 16 and a batch of 1 may sum a convolution in another order: a few float32
    # ulps of the largest value
    for got, expected in ((mu, expected_mu), (sigma, expected_sigma)):
        ulps = 16 * np.finfo(np.float32).eps * np.abs(expected).max()
        np.testing.assert_allclose(got.isel(time=1, lead_time=1).values, expected, atol=ulps)


def test_emos_nc_keeps_each_variables_coefficients_on_its_own_dims(tmp_path: Path) -> None:
    train, test = (_with_surface(_ensemble(dates=d, seed=d)) for d in (5, 2))
    run = tmp_path / "emos"
    train_postprocessor(
        train,
        PostprocessConfig(
            model="emos", members=2, train=TrainConfig(progress=False, tensorboard=False)
        ),
        run,
    )
    with xr.open_dataset(run / "emos.nc") as stored:
        packed = stored.load()
    # the surface field's fits are not repeated along the levelled field's 'level'
    assert packed["t2m.a"].dims == ("lead_time",)
    assert packed["psi.a"].dims == ("lead_time", "level")
    mu, _ = predict_run(run, test)["t2m"]
    assert mu.dims == test["t2m_truth"].dims
    # an emos.nc of the older layout (every variable stacked along 'variable') is refused
    old = xr.concat(
        [unpack_coefficients(packed, var) for var in ("psi", "t2m")],
        dim=pd.Index(["psi", "t2m"], name="variable"),
    )
    old.to_netcdf(run / "emos.nc")
    with pytest.raises(ValueError, match=r"emos.nc: the EMOS coefficients are not in the per"):
        predict_run(run, test)


def test_combined_seeds_have_the_mean_of_their_quantiles() -> None:
    rng = np.random.default_rng(3)
    coords = {"time": np.arange(4), "lat": [0.0, 1.0, 2.0]}
    forecasts = [
        {"t": tuple(xr.DataArray(v, dims=("time", "lat"), coords=coords) for v in pair)}
        for pair in [(rng.normal(size=(4, 3)), rng.uniform(0.1, 2, size=(4, 3))) for _ in range(3)]
    ]
    mu, sigma = combine_seeds(forecasts)["t"]
    for p in (0.02, 0.3, 0.5, 0.9):
        quantiles = [norm.ppf(p, f["t"][0], f["t"][1]) for f in forecasts]
        np.testing.assert_allclose(norm.ppf(p, mu, sigma), np.mean(quantiles, axis=0), rtol=1e-12)
    assert mu.dims == ("time", "lat") and list(mu["lat"].values) == [0.0, 1.0, 2.0]


def test_combining_forecasts_that_do_not_line_up_is_refused() -> None:
    one = xr.DataArray(np.ones((2, 3)), dims=("time", "lat"), coords={"lat": [0.0, 1.0, 2.0]})
    shifted = one.assign_coords(lat=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="forecasts of 't' are not on one grid"):
        combine_seeds([{"t": (one, one)}, {"t": (shifted, shifted)}])
    with pytest.raises(ValueError, match="other variables"):
        combine_seeds([{"t": (one, one)}, {"q": (one, one)}])
    with pytest.raises(ValueError, match="other dims"):
        combine_seeds([{"t": (one, one)}, {"t": (one.T, one.T)}])
    with pytest.raises(ValueError, match="at least one"):
        combine_seeds([])
