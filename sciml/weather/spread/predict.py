"""A trained spread run's model and forecast on new data, rebuilt from its run folder.

:func:`load_spread_model` rebuilds the network with its checkpoint's weights;
:func:`predict_spread` gives a run's predicted standard deviation on new data, in the data's
units: the spread of an ensemble of the training data's size (``ensemble`` in the
configuration), whatever the size of the data it is applied to, after putting the data on
the run's grid by label (:func:`sciml.weather.grid.align_to_run`).
"""

from __future__ import annotations

from pathlib import Path

import torch
import xarray as xr
from torch.utils.data import DataLoader

from sciml.weather.grid import align_to_run
from sciml.weather.postprocess.predict import labelled_like_truth
from sciml.weather.spread.data import SpreadDataset, lead_days
from sciml.weather.spread.model import SpreadPredictor
from sciml.weather.spread.record import read_spread_data, read_spread_run

__all__ = ["load_spread_model", "predict_spread"]


def load_spread_model(run_dir: Path | str, *, checkpoint: str = "best") -> SpreadPredictor:
    """The model of a spread run with the weights of its ``best`` or ``last`` checkpoint.

    Raises:
        FileNotFoundError: No run or no such checkpoint.
    """
    from sciml.training.checkpoint import load_checkpoint

    config, _ = read_spread_run(run_dir)
    path = Path(run_dir) / "checkpoints" / f"{checkpoint}.pt"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no {checkpoint!r} checkpoint ({path})")
    model = config.build()
    load_checkpoint(path, model, restore_rng=False)
    return model.eval()


def predict_spread(
    run_dir: Path | str, test: xr.Dataset, *, batch_size: int = 16, data: str = "the data"
) -> dict[str, xr.DataArray]:
    """A run's predicted standard deviation of every variable on ``test``, in its units.

    It is the spread of an ensemble of the run's ``ensemble`` members (the training data's
    size), predicted from the first ``members`` of ``test``, on ``test``'s own order of
    points and levels (``test`` is put on the run's grid by label first).

    Args:
        run_dir: The spread run folder.
        test: The data.
        batch_size: Samples per forward pass.
        data: How error messages name ``test`` (e.g. ``"the test data (test.nc)"``).

    Raises:
        FileNotFoundError: Not a spread run, or no ``best`` checkpoint.
        sciml.weather.labels.LabelMismatch: ``test`` on another grid than the run was trained
            on, or with levels or lead times it never saw (both sides named).
        KeyError, ValueError: ``test`` lacks a variable, has fewer members or lead times
            than the run needs, or (for a temporal run) other lead times than it was
            trained on (the earlier steps would be other intervals back).
    """
    config, stats = read_spread_run(run_dir)
    aligned = align_to_run(test, read_spread_data(run_dir), run=str(run_dir), data=data)
    on_grid = aligned.data
    model = load_spread_model(run_dir)
    samples = SpreadDataset(
        on_grid, config.variables or (), members=config.members, history=config.history, stats=stats
    )
    if config.history > 1 and lead_days(on_grid) != config.lead_days:
        raise ValueError(
            f"--run-dir {run_dir} stacks {config.history} lead times and was trained on lead "
            f"times {list(config.lead_days)} days; {data} has {list(lead_days(on_grid))}"
        )
    with torch.no_grad():
        parts = [model(b["history"], b["available"]) for b in DataLoader(samples, batch_size)]
    scale = torch.tensor(stats.std, dtype=torch.float64)[:, None, None]
    sd = torch.cat(parts).double() * scale
    out = {}
    for v, var in enumerate(config.variables or ()):
        picked = sd[:, v * config.levels : (v + 1) * config.levels]
        truth = on_grid[f"{var}_truth"]
        spread = labelled_like_truth(picked, truth, own=["level"])
        out[var] = aligned.restore(
            aligned.in_data_units(var, spread, difference=True), test[f"{var}_truth"].dims
        )
    return out
