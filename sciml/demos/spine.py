"""Demo section for the shared spine: xarray data -> training loop -> checkpoint.

Learns 500 hPa temperature from the 850 hPa temperature and the two
geopotential levels of the real ERA5 ensemble sample with a small 2D U-Net,
through :class:`~sciml.datasets.xarray_dataset.XarrayDataset` and :func:`~sciml.training.fit`.
Training resumes from ``outdir/spine`` (``spine-quick`` in quick mode) when a
previous run was interrupted; on a signal the section raises
:class:`~sciml.demos.DemoInterrupted` after the checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import torch
import xarray as xr
from matplotlib.ticker import MaxNLocator
from torch import nn

from sciml.datasets import sample_path
from sciml.datasets.xarray_dataset import XarrayDataset, compute_stats, open_dataset
from sciml.demos import stop_if_interrupted
from sciml.demos.report import save_figure
from sciml.models import UNet
from sciml.training import TrainConfig, fit


def _loss(model: nn.Module, batch: torch.Tensor) -> dict[str, torch.Tensor]:
    # channels: z850, z500, t850 -> t500
    x, y = batch[:, :3], batch[:, 3:]
    mse = nn.functional.mse_loss(model(x), y)
    return {"loss": mse, "rmse": mse.detach().sqrt()}


def demo(outdir: Path, *, quick: bool = False) -> str:
    """Train the small model, plot the loss and one prediction, return Markdown."""
    ds = open_dataset(sample_path("era5_ensemble"), chunks={}).isel(
        latitude=slice(0, 60)
    )  # 60 x 120: divides by 4
    stats = compute_stats(ds, ["z", "t"], channel_dims=("isobaricInhPa",))
    members = ds.sizes["number"]

    def dataset(part: xr.Dataset) -> XarrayDataset:
        return XarrayDataset(
            part,
            ["z", "t"],
            sample_dims=("number", "time"),
            channel_dims=("isobaricInhPa",),
            stats=stats,
        )

    train = dataset(ds.isel(number=slice(0, members - 2)))
    val = dataset(ds.isel(number=slice(members - 2, None)))
    torch.manual_seed(0)
    model = UNet(3, 1, dims=2, base_channels=8, depth=2, norm="group")
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    run_dir = outdir / ("spine-quick" if quick else "spine")
    config = TrainConfig(epochs=2 if quick else 12, batch_size=8, seed=0, progress=False)
    result = fit(model, optimizer, train, _loss, run_dir=run_dir, config=config, val_dataset=val)
    stop_if_interrupted(result, "spine")

    epochs = [h["epoch"] for h in result.history]
    fig, (ax_loss, ax_map) = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
    ax_loss.plot(epochs, [h["train_rmse"] for h in result.history], "o-", label="train")
    ax_loss.plot(epochs, [h["val_rmse"] for h in result.history], "s-", label="validation")
    ax_loss.set(xlabel="epoch", ylabel="RMSE (standardised units)", title="training")
    ax_loss.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_loss.legend()
    model.eval()
    with torch.no_grad():
        sample = val[0]
        error = (model(sample[None, :3])[0, 0] - sample[3]) * stats.std[3]
    image = ax_map.pcolormesh(
        ds["longitude"].values,
        ds["latitude"].values,
        error.numpy(),  # (latitude, longitude), as the dataset's variables
        cmap="RdBu_r",
        vmin=-3,
        vmax=3,
        shading="auto",
    )
    ax_map.set(
        title="T500 error of a held-out member",
        xlabel="longitude (°E)",
        ylabel="latitude (°N)",
        aspect="equal",
    )
    fig.colorbar(image, ax=ax_map, shrink=0.8, extend="both", label="error (K)")
    figure = save_figure(fig, outdir, "spine_training.png", dpi=110)
    last = result.history[-1]
    return "\n".join(
        [
            "## Spine: xarray data, training loop, checkpoints",
            "",
            f"A 2D U-Net learns T500 from Z850, Z500 and T850 on the real ERA5 ensemble sample "
            f"({train.layout.shape[0]} members x {train.layout.shape[1]} times for training, "
            f"{val.layout.shape[0]} held-out members), read lazily through `XarrayDataset`.",
            "",
            f"- epochs: {result.epoch}, optimiser steps: {result.global_step}, "
            f"status: {result.status}",
            f"- validation RMSE: {last['val_rmse'] * stats.std[3]:.2f} K "
            f"(train {last['train_rmse'] * stats.std[3]:.2f} K)",
            f"- metrics: `{(run_dir / 'metrics.csv').relative_to(outdir)}`, "
            f"checkpoint: `{result.checkpoint.relative_to(outdir)}`",
            "",
            f"![training]({figure})",
        ]
    )
