"""The raw ensemble's CRPS as the deep models' loss scale: values, labels, loss, run folder."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from sciml.datasets.channels import compute_stats
from sciml.training import TrainConfig
from sciml.weather.dataset import EnsembleDataset
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.loss_scale import raw_crps_scale
from sciml.weather.postprocess.models import PostProcessor, gaussian_crps_loss
from sciml.weather.postprocess.record import read_run
from sciml.weather.postprocess.train import train_postprocessor
from tests.weather.conftest import pairwise_crps

LEADS = np.arange(3) * np.timedelta64(1, "D")


def _ensemble(seed: int = 0) -> xr.Dataset:
    """3 members; the error grows with the lead time (0.1, 0.6, 1.1) and differs by level."""
    rng = np.random.default_rng(seed)
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    shape = (3, 4, 3, 2, 4, 5)
    growth = (0.1 + 0.5 * np.arange(3))[:, None, None, None] * np.array([1, 2])[:, None, None]
    data = {}
    for name in ("psi", "q"):
        signal = rng.standard_normal(shape[1:])
        data[name] = (dims, signal + growth * rng.standard_normal(shape))
        data[f"{name}_truth"] = (dims[1:], signal + growth * rng.standard_normal(shape[1:]))
    coords = {"lead_time": LEADS, "level": [1, 2]}
    return xr.Dataset(data, coords=coords)


def test_the_scale_is_the_raw_crps_of_each_channel_and_lead_time_in_normalised_units() -> None:
    ds = _ensemble()
    stats = compute_stats(ds, ["psi", "q"], channel_dims=("level",))
    scale = raw_crps_scale(ds, ["psi", "q"], stats=stats)
    assert scale.dims == ("channel", "lead_time")
    assert tuple(scale["channel"].values) == stats.channels
    for c, name in enumerate(stats.channels):
        var, level = name[: -len("[level=1]")], int(name[-2])
        for t in range(3):
            truth = ds[f"{var}_truth"].isel(lead_time=t).sel(level=level).values
            members = ds[var].isel(lead_time=t).sel(level=level).transpose(..., "member").values
            expected = pairwise_crps(truth, members).mean() / stats.std[c]
            assert scale.values[c, t] == pytest.approx(expected, rel=1e-12)
    # the error grows with the lead time: the scales differ, so a misplaced one shows
    assert (np.diff(scale.values, axis=1) > 0).all()


def test_a_row_the_raw_ensemble_forecasts_perfectly_cannot_scale_the_loss() -> None:
    ds = _ensemble()
    ds["q"][dict(lead_time=0)] = ds["q_truth"].isel(lead_time=0)  # every member is the truth
    stats = compute_stats(ds, ["psi", "q"], channel_dims=("level",))
    with pytest.raises(ValueError, match=r"positive and finite.*\('q\[level=1\]', '0 days"):
        raw_crps_scale(ds, ["psi", "q"], stats=stats)
    with pytest.raises(ValueError, match="no lead_time dim"):
        raw_crps_scale(ds.isel(lead_time=0), ["psi"], stats=stats)
    with pytest.raises(ValueError, match="are not the statistics'"):
        raw_crps_scale(ds, ["q", "psi"], stats=stats)


def test_each_sample_carries_its_lead_times_scale_matched_by_label() -> None:
    ds = _ensemble()
    stats = compute_stats(ds, ["psi", "q"], channel_dims=("level",))
    scale = raw_crps_scale(ds, ["psi", "q"], stats=stats)
    shuffled = scale.isel(channel=[2, 0, 3, 1], lead_time=[2, 0, 1])  # labels, not positions
    data = EnsembleDataset(ds, ["psi", "q"], members=2, stats=stats, crps_scale=shuffled)
    for index in (0, 1, 2, 4, 11):
        sample = data[index]
        lead = LEADS[index % 3]
        expected = scale.sel(lead_time=lead).values
        assert sample["crps_scale"].shape == (4, 1, 1)
        torch.testing.assert_close(
            sample["crps_scale"][:, 0, 0], torch.tensor(expected, dtype=torch.float32)
        )
    with pytest.raises(ValueError, match=r"no lead_time \['2 days"):
        EnsembleDataset(
            ds, ["psi", "q"], members=2, stats=stats, crps_scale=scale.isel(lead_time=[0, 1])
        )
    with pytest.raises(ValueError, match=r"no channel \['q\[level=2\]'\]"):
        EnsembleDataset(
            ds, ["psi", "q"], members=2, stats=stats, crps_scale=scale.isel(channel=[0, 1, 2])
        )


def test_the_scaled_loss_is_the_mean_crps_relative_to_each_rows_scale() -> None:
    torch.manual_seed(0)
    model = PostProcessor(2, backbone="mlp").double()
    batch = {
        "members": torch.randn(3, 4, 2, 5, 6, dtype=torch.float64),
        "truth": torch.randn(3, 2, 5, 6, dtype=torch.float64),
        "lead_time": torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64),
        "crps_scale": torch.tensor([[0.5, 2.0], [1.0, 4.0], [0.25, 1.0]], dtype=torch.float64)[
            :, :, None, None
        ],
    }
    mu, sigma = model(batch["members"], None, batch["lead_time"])
    z = (batch["truth"] - mu) / sigma
    pdf = torch.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
    crps = sigma * (z * torch.erf(z / math.sqrt(2)) + 2 * pdf - 1 / math.sqrt(math.pi))
    expected = (crps / batch["crps_scale"]).mean()
    torch.testing.assert_close(gaussian_crps_loss(model, batch), expected, rtol=1e-12, atol=0)
    plain = {k: v for k, v in batch.items() if k != "crps_scale"}
    torch.testing.assert_close(gaussian_crps_loss(model, plain), crps.mean(), rtol=1e-12, atol=0)


def test_a_deep_run_keeps_its_scale_and_says_which_loss_it_trained_on(tmp_path: Path) -> None:
    ds = _ensemble()
    run = tmp_path / "mlp"
    quick = TrainConfig(epochs=1, progress=False, tensorboard=False)
    scaled = PostprocessConfig(model="mlp", members=2, train=quick)
    unscaled = dataclasses.replace(scaled, loss_scale="none")
    train_postprocessor(ds, scaled, run)
    config, stats = read_run(run)
    assert config.loss_scale == "raw-crps"
    with xr.open_dataarray(run / "crps_scale.nc") as saved:
        train = ds.isel(time=slice(3))  # the last of 4 dates validates
        xr.testing.assert_allclose(saved, raw_crps_scale(train, ["psi", "q"], stats=stats))
    with pytest.raises(ValueError, match="another configuration.*loss_scale"):
        train_postprocessor(ds, unscaled, run)
    with pytest.raises(ValueError, match="loss_scale must be one of"):
        train_postprocessor(
            ds, PostprocessConfig(model="mlp", members=2, loss_scale="raw"), tmp_path / "x"
        )
    plain = tmp_path / "plain"
    train_postprocessor(ds, unscaled, plain)
    assert read_run(plain)[0].loss_scale == "none" and not (plain / "crps_scale.nc").exists()
