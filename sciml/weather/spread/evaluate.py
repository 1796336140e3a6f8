"""Score spread predictions against the full ensemble's spread (``sciml weather spread evaluate``).

One row per model, variable, level and lead time: the Pearson correlation, over start dates
and grid points, of a predicted standard deviation with the full ensemble's (ddof=1), and
the RMSE between them (in the data's units), both in float64. Rows ``sample_k`` (the
baseline: the sample standard deviation, ddof=1, of the first ``k`` members, for every ``k``
the runs use) are always included; a run's row is named ``spread_<k>_<loss>`` with
``_t<history>`` for a temporal run (the run folder's name is added when names repeat).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from sciml.weather.spread.config import SpreadConfig
from sciml.weather.spread.predict import predict_spread
from sciml.weather.spread.record import read_spread_run

__all__ = ["evaluate_spread", "spread_scores"]

KEEP = ("lead_time", "level")


def spread_scores(predicted: xr.DataArray, full: xr.DataArray) -> xr.Dataset:
    """``corr`` and ``rmse`` of ``predicted`` against ``full``, per lead time and level.

    Both must have the same dims and coordinates (aligned by label: a mismatch is an error).

    Raises:
        ValueError: Different dims or coordinates.
    """
    if set(predicted.dims) != set(full.dims):
        raise ValueError(f"dims differ: predicted {predicted.dims}, full spread {full.dims}")
    try:
        predicted, full = xr.align(predicted, full, join="exact")
    except ValueError as err:
        raise ValueError(f"the predicted and full spread have other coordinates: {err}") from None
    dims = [d for d in full.dims if d not in KEEP]
    predicted, full = predicted.astype(np.float64), full.astype(np.float64)
    return xr.Dataset(
        {
            "corr": xr.corr(predicted, full, dim=dims),
            "rmse": np.sqrt(((predicted - full) ** 2).mean(dims)),
        }
    ).compute()


def _rows(name: str, config: dict, var: str, scores: xr.Dataset) -> list[dict]:
    frame = scores.drop_attrs().to_dataframe().reset_index()
    rows = []
    for record in frame.to_dict("records"):
        lead = record.pop("lead_time")
        days = lead / pd.Timedelta(days=1) if isinstance(lead, pd.Timedelta) else float(lead)
        rows.append({"model": name, **config, "variable": var, "lead_days": days, **record})
    return rows


def _names(runs: list[tuple[Path, SpreadConfig]]) -> list[str]:
    names = [
        f"spread_{c.members}_{c.loss}" + (f"_t{c.history}" if c.history > 1 else "")
        for _, c in runs
    ]
    return [
        f"{name}_{path.name}" if names.count(name) > 1 else name
        for name, (path, _) in zip(names, runs, strict=True)
    ]


def evaluate_spread(
    run_dirs: Sequence[Path | str], test: xr.Dataset, *, data: str = "the test data"
) -> pd.DataFrame:
    """The score table (see the module docstring) of spread runs and baselines on ``test``.

    Args:
        run_dirs: Spread run folders.
        test: Test ensemble; put on each run's grid by label
            (:func:`~sciml.weather.spread.predict.predict_spread`).
        data: How error messages name ``test`` (e.g. the file).

    Raises:
        ValueError: No run, runs of more members than ``test`` has, or runs that predict
            the spread of an ensemble of another size than ``test``'s.
        sciml.weather.labels.LabelMismatch: ``test`` on another grid than a run's.
        KeyError: A variable of a run is missing from ``test``.
        FileNotFoundError: A folder that is not a spread run.
    """
    if not run_dirs:
        raise ValueError("evaluate needs at least one run folder")
    runs = [(Path(r), read_spread_run(r)[0]) for r in run_dirs]
    full_size = test.sizes.get("member", 0)
    larger = [str(path) for path, c in runs if c.members > full_size]
    if larger:
        raise ValueError(f"runs {larger} use more members than the test data have ({full_size})")
    other = {str(path): c.ensemble for path, c in runs if c.ensemble != full_size}
    if other:
        raise ValueError(
            f"runs predict the spread of ensembles of other sizes ({other} members) than the "
            f"test data's full ensemble ({full_size} members), which they are scored against"
        )
    variables = list(dict.fromkeys(v for _, c in runs for v in c.variables or ()))
    missing = [v for v in variables if v not in test.data_vars]
    if missing:
        raise KeyError(f"{data} lack {missing}")
    predictions = [predict_spread(path, test, data=data) for path, _ in runs]
    rows: list[dict] = []
    for var in variables:
        full = test[var].std("member", ddof=1)
        for k in sorted({c.members for _, c in runs}):
            sample = test[var].isel(member=slice(k)).std("member", ddof=1)
            info = {"members": k, "history": 0, "loss": "none"}
            rows += _rows(f"sample_{k}", info, var, spread_scores(sample, full))
        for (_, c), name, predicted in zip(runs, _names(runs), predictions, strict=True):
            if var in predicted:
                info = {"members": c.members, "history": c.history, "loss": c.loss}
                rows += _rows(name, info, var, spread_scores(predicted[var], full))
    return pd.DataFrame(rows)
