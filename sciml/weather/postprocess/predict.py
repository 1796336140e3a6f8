"""The Gaussian forecast of a trained post-processing run on new data (any model of the registry).

:func:`load_postprocessor` rebuilds a deep model from its run folder;
:func:`predict_run` rebuilds a run from its folder
(:func:`sciml.weather.postprocess.record.read_run`),
puts the data on the grid the run was trained on (:func:`sciml.weather.grid.align_to_run`:
latitudes, longitude convention, levels and dim order aligned by label, another grid
refused; data in other units that convert to the run's are converted, others refused)
and returns, for every variable of the run, ``(mu, sigma)`` on the data's own dims, order
and coordinates, in the data's own units (the deep models' normalised outputs are scaled
back with the run's channel statistics, then converted back). Each variable keeps its own dims: a
surface field beside levelled ones has no ``level`` in its forecast. :func:`combine_seeds`
makes one forecast of several runs' (a seed ensemble).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import xarray as xr
from torch.utils.data import DataLoader

from sciml.weather.data import refuse_missing
from sciml.weather.grid import align_to_run
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.models import GaussianPostProcessor, build_postprocessor
from sciml.weather.postprocess.record import read_data_record, read_run
from sciml.weather.postprocess.registry import MODELS

__all__ = [
    "Forecast",
    "combine_seeds",
    "labelled_like_truth",
    "load_postprocessor",
    "predict_run",
]

SAMPLE_DIMS = ("time", "lead_time")
#: ``(mu, sigma)`` of every variable.
Forecast = dict[str, tuple[xr.DataArray, xr.DataArray]]


def load_postprocessor(run_dir: Path | str, *, checkpoint: str = "best") -> GaussianPostProcessor:
    """The deep model of a run folder, with the weights of its ``best`` or ``last`` checkpoint.

    Raises:
        FileNotFoundError: No run or no such checkpoint.
        ValueError: The run is an EMOS run, or of another run format.
    """
    from sciml.training.checkpoint import load_checkpoint

    config, stats = read_run(run_dir)
    entry = MODELS[config.model]
    if not entry.deep:
        article = "an" if entry.called[0].lower() in "aeiou" else "a"
        raise ValueError(
            f"{run_dir} is {article} {entry.called} run, a closed-form fit: its parameters are "
            f"in {entry.params}"
        )
    path = Path(run_dir) / "checkpoints" / f"{checkpoint}.pt"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no {checkpoint!r} checkpoint ({path})")
    model = build_postprocessor(config, len(stats.channels))
    load_checkpoint(path, model, restore_rng=False)
    return model.eval()


def _deep_forecast(run_dir: Path, config: PostprocessConfig, test: xr.Dataset) -> Forecast:
    from sciml.weather.dataset import EnsembleDataset

    _, stats = read_run(run_dir)
    model = load_postprocessor(run_dir)
    data = EnsembleDataset(
        test,
        list(config.variables or ()),
        members=config.members,
        stats=stats,
        channel_dims=config.channel_dims,
        static=config.static or (),
        missing=config.missing,  # type: ignore[arg-type]
    )
    parts: list[tuple[torch.Tensor, torch.Tensor]] = []
    with torch.no_grad():
        for batch in DataLoader(data, batch_size=16):
            parts.append(model(batch["members"], batch.get("static"), batch.get("lead_time")))
    mean = torch.tensor(stats.mean, dtype=torch.float64)[:, None, None]
    std = torch.tensor(stats.std, dtype=torch.float64)[:, None, None]
    mu = torch.cat([p[0] for p in parts]).double() * std + mean
    sigma = torch.cat([p[1] for p in parts]).double() * std
    out: Forecast = {}
    start = 0
    for var in config.variables or ():
        truth = test[f"{var}_truth"]
        own = [d for d in config.channel_dims if d in truth.dims]
        count = int(np.prod([truth.sizes[d] for d in own]))
        picked = slice(start, start + count)
        out[var] = (
            labelled_like_truth(mu[:, picked], truth, own=own),
            labelled_like_truth(sigma[:, picked], truth, own=own),
        )
        start += count
    return out


def labelled_like_truth(
    values: torch.Tensor, truth: xr.DataArray, *, own: list[str]
) -> xr.DataArray:
    """``(sample, channel, *spatial)`` values on the truth's dims and coordinates."""
    spatial = [d for d in truth.dims if d not in (*SAMPLE_DIMS, *own)]
    dims = (*SAMPLE_DIMS, *own, *spatial)
    block = values.numpy().reshape([truth.sizes[d] for d in dims])
    return xr.DataArray(block, dims=dims, coords=truth.coords).transpose(*truth.dims)


def predict_run(run_dir: Path | str, test: xr.Dataset, *, data: str = "the data") -> Forecast:
    """The Gaussian forecast ``(mu, sigma)`` of every variable of a run, on ``test``.

    Args:
        run_dir: The run folder.
        test: The data, on the run's grid in any order (see the module docstring).
        data: How error messages name ``test`` (e.g. ``"the test data (test.nc)"``).

    Raises:
        FileNotFoundError: Not a run folder, or its model file is missing.
        sciml.weather.labels.LabelMismatch: ``test`` on another grid than the run was trained
            on, or with levels or lead times it never saw (both sides named).
        sciml.datasets.cf.UnitsMismatch: A variable of ``test`` in units that do not
            convert to the run's (both named).
        ValueError: An EMOS run whose ``emos.nc`` has the older layout (refit it) or
            whose variables have other channel dims in ``test`` than in training (a
            closed-form model's forecast refuses data in its own terms).
        KeyError: A variable or static field of the run is missing from ``test`` (both
            named).
    """
    run_dir = Path(run_dir)
    config, _ = read_run(run_dir)
    absent = [
        name
        for name in (*(config.variables or ()), *(config.static or ()))
        if name not in test.data_vars
    ]
    if absent:
        raise KeyError(
            f"{data} lack {absent}, which the run in {run_dir} (--run-dir) reads; they have "
            f"{sorted(map(str, test.data_vars))}"
        )
    if config.missing == "refuse":  # every model: a closed-form one predicted NaN there, unsaid
        refuse_missing(
            test,
            [*(config.variables or ()), *(config.static or ())],
            advice=f"the run in {run_dir} (--run-dir) was trained with --missing refuse: fill "
            "them, or use a run trained with --missing mask",
        )
    aligned = align_to_run(test, read_data_record(run_dir), run=str(run_dir), data=data)
    if MODELS[config.model].deep:
        forecast = _deep_forecast(run_dir, config, aligned.data)
    else:
        forecast = _closed_form_forecast(run_dir, config, aligned.data)
    own = {var: [d for d in test[var].dims if d != "member"] for var in config.variables or ()}
    out = {
        var: (
            aligned.restore(aligned.in_data_units(var, mu), own[var]),
            aligned.restore(aligned.in_data_units(var, sigma, difference=True), own[var]),
        )
        for var, (mu, sigma) in forecast.items()
    }
    if config.missing == "mask":  # missing wherever a member the run reads is missing
        for var, pair in out.items():
            present = test[var].isel(member=slice(config.members)).notnull().all("member")
            out[var] = (pair[0].where(present), pair[1].where(present))
    return out


def _closed_form_forecast(run_dir: Path, config: PostprocessConfig, test: xr.Dataset) -> Forecast:
    """A closed-form model's ``(mu, sigma)`` of every variable, from its parameter file."""
    entry = MODELS[config.model]
    path = run_dir / entry.params
    with xr.open_dataset(path) as stored:
        params = stored.load()
    forecast: Forecast = entry.function("forecast")(params, config, test, source=path)
    return forecast


def combine_seeds(forecasts: Sequence[Forecast]) -> Forecast:
    """One Gaussian forecast from several runs' (the seeds of a model): mean mu, mean sigma.

    It is the Gaussian whose every quantile is the mean of the runs' quantiles
    (Vincentization, which Schulz & Lerch 2022 found the best way to aggregate deep
    ensembles of distributional post-processing): a Gaussian's quantile at level ``p`` is
    ``mu + sigma * z_p``, linear in both. The CRPS is the integral of the quantile scores,
    each convex in the quantile, so the combined forecast's CRPS is at most the mean of the
    runs' at every point.

    Raises:
        ValueError: No forecast, forecasts of other variables, or arrays that differ in
            dims or coordinates (never aligned by dropping points).
    """
    if not forecasts:
        raise ValueError("combine_seeds needs at least one forecast")
    variables = list(forecasts[0])
    others = [sorted(f) for f in forecasts if list(f) != variables]
    if others:
        raise ValueError(f"the forecasts have other variables: {variables} and {others[0]}")
    out: Forecast = {}
    for var in variables:
        try:
            arrays = xr.align(*(a for f in forecasts for a in f[var]), join="exact")
        except ValueError as error:
            raise ValueError(f"the forecasts of {var!r} are not on one grid: {error}") from None
        mus, sigmas = arrays[0::2], arrays[1::2]
        if len({a.dims for a in arrays}) > 1:
            raise ValueError(f"the forecasts of {var!r} have other dims: {[a.dims for a in mus]}")
        out[var] = (sum(mus[1:], mus[0]) / len(mus), sum(sigmas[1:], sigmas[0]) / len(sigmas))
    return out
