"""The post-processing registry: a new model is one module and one entry.

This module is such a model's module: two toy models (a closed-form "raw mean + constant
spread" and a deep "raw ensemble with one learned spread factor") registered for a test
and trained, predicted and evaluated through the package's own functions.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr
from torch import Tensor, nn

from sciml.training import TrainConfig
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.evaluate import evaluate_runs
from sciml.weather.postprocess.models import GaussianPostProcessor, member_mean_sd
from sciml.weather.postprocess.predict import load_postprocessor, predict_run
from sciml.weather.postprocess.registry import (
    MODELS,
    PostprocessModel,
    model_entry,
    registered,
)
from sciml.weather.postprocess.train import train_postprocessor
from tests.weather.postprocess.test_evaluate import _ensemble

HERE = __name__


def fit(train: xr.Dataset, config: PostprocessConfig) -> xr.Dataset:
    """Each variable's RMSE of the raw mean per level and lead time: the constant spread."""
    out = {}
    for var in config.variables or ():
        mean = train[var].isel(member=slice(config.members)).mean("member")
        keep = ["lead_time", *(d for d in config.channel_dims if d in mean.dims)]
        pooled = [d for d in mean.dims if d not in keep]
        out[var] = np.sqrt(((mean - train[f"{var}_truth"]) ** 2).mean(pooled))
    return xr.Dataset(out)


def forecast(
    params: xr.Dataset, config: PostprocessConfig, test: xr.Dataset, *, source: Path
) -> dict[str, tuple[xr.DataArray, xr.DataArray]]:
    """The raw mean of the first members and the fitted spread, on ``test``."""
    out = {}
    for var in config.variables or ():
        mu = test[var].isel(member=slice(config.members)).mean("member")
        sigma = params[var].sel(lead_time=test["lead_time"].values).broadcast_like(mu)
        out[var] = (mu, sigma.transpose(*mu.dims))
    return out


class ScaledRaw(GaussianPostProcessor):
    """The raw ensemble's Gaussian, its spread times one learned factor."""

    def __init__(self, channels: int, *, static: int = 0) -> None:
        """``channels`` per member, ``static`` fields (read and ignored)."""
        super().__init__(channels, static=static)
        self.log_factor = nn.Parameter(torch.zeros(()))

    def forward(
        self, members: Tensor, static: Tensor | None = None, lead_time: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(mu, sigma)`` of the members, ``(N, C, H, W)``."""
        self.extras(members, static, lead_time)
        mean, sd = member_mean_sd(members)
        return mean, sd * self.log_factor.exp() + 1e-3


def build(config: PostprocessConfig, channels: int) -> ScaledRaw:
    """The deep toy model."""
    return ScaledRaw(channels, static=len(config.static or ()))


CONSTANT = PostprocessModel("constant", fit=f"{HERE}:fit", forecast=f"{HERE}:forecast")
SCALED = PostprocessModel("scaled", build=f"{HERE}:build")
LOOP = TrainConfig(epochs=1, progress=False, tensorboard=False)


def test_every_entry_resolves_and_is_deep_or_closed_form() -> None:
    for entry in MODELS.values():
        if entry.deep:
            assert callable(entry.function("build"))
        else:
            assert callable(entry.function("fit")) and callable(entry.function("forecast"))
    assert [name for name, entry in MODELS.items() if not entry.deep] == ["emos"]
    assert MODELS["pooled"].choice == "random" and MODELS["emos"].params == "emos.nc"


def test_a_bad_entry_or_name_is_refused() -> None:
    with pytest.raises(ValueError, match="give build"):
        PostprocessModel("both", build="m:f", fit="m:g", forecast="m:h")
    with pytest.raises(ValueError, match="give build"):
        PostprocessModel("half", fit="m:g")
    with pytest.raises(ValueError, match="no post-processing model 'nope'"):
        model_entry("nope")
    with pytest.raises(ValueError, match="already registered"), registered(MODELS["emos"]):
        pass
    with pytest.raises(ValueError, match="no fit function"):
        MODELS["mlp"].function("fit")


def test_a_registered_toy_model_trains_predicts_and_evaluates(tmp_path: Path) -> None:
    train, test = _ensemble(dates=6, seed=0), _ensemble(dates=2, seed=1)
    with registered(CONSTANT), registered(SCALED):
        runs = []
        for name in ("constant", "scaled", "emos"):
            run = tmp_path / name
            config = PostprocessConfig(model=name, members=2, train=LOOP)
            assert train_postprocessor(train, config, run) == "completed"
            runs.append(run)
        assert (tmp_path / "constant" / "constant.nc").exists()
        assert (tmp_path / "scaled" / "checkpoints" / "best.pt").exists()
        assert isinstance(load_postprocessor(tmp_path / "scaled"), ScaledRaw)
        with pytest.raises(ValueError, match="is a constant run, a closed-form fit"):
            load_postprocessor(tmp_path / "constant")
        mu, sigma = predict_run(tmp_path / "constant", test)["psi"]
        raw = test["psi"].isel(member=slice(2)).mean("member")
        xr.testing.assert_allclose(mu, raw.transpose(*mu.dims))
        assert sigma.dims == mu.dims and float(sigma.std(["time", "lat", "lon"]).max()) == 0
        table = evaluate_runs(runs, test)
    assert {"constant_2", "scaled_2", "emos_2", "raw_2", "raw_4"} <= set(table.model)
    assert np.isfinite(table[table.model.isin(["constant_2", "scaled_2"])].crps).all()
    assert "constant" not in MODELS and "scaled" not in MODELS
    with pytest.raises(ValueError, match="model must be one of"):
        PostprocessConfig(model="constant")
