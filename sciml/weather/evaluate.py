"""Score post-processing runs against the raw ensemble on test data (``sciml weather evaluate``).

One row per model, variable, level and lead time, averaged over start dates and grid
points: the CRPS and which one it is (``ensemble standard`` for the raw ensembles,
``gaussian closed form`` for EMOS and the deep models), its skill against the raw full
ensemble (``1 - CRPS / CRPS(raw_M)``), the RMSE of the mean and the spread-skill ratio
(the raw ensembles' with the (M+1)/M correction; for a Gaussian, the RMS of sigma over the
RMSE of mu). Rows ``raw_M`` (every member of the test data) and ``raw_k`` (the first ``k``,
for each ``k`` the runs use) are always included. A model row is named
``<model>_<k>`` (``_seed<s>`` added when runs differ only by seed).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from sciml.weather import metrics
from sciml.weather.predict import predict_run
from sciml.weather.train import RunConfig, read_run

__all__ = ["evaluate_runs", "predict_run"]


def _reduce_dims(truth: xr.DataArray, keep: Sequence[Hashable]) -> list[Hashable]:
    return [d for d in truth.dims if d not in keep]


def _rows(name: str, members: int, var: str, scores: xr.Dataset, kind: str) -> list[dict]:
    frame = scores.to_dataframe().reset_index()
    rows = []
    for record in frame.to_dict("records"):
        lead = record.pop("lead_time")
        days = pd.Timedelta(lead) / pd.Timedelta(days=1) if not isinstance(lead, float) else lead
        rows.append(
            {"model": name, "members": members, "variable": var, "lead_days": days, **record}
            | {"crps_kind": kind}
        )
    return rows


def evaluate_runs(run_dirs: Sequence[Path | str], test: xr.Dataset) -> pd.DataFrame:
    """The score table (see the module docstring) of runs and raw ensembles on ``test``.

    Raises:
        ValueError: Runs of other variables than ``test`` holds, runs of more members than
            it has, or no run.
    """
    if not run_dirs:
        raise ValueError("evaluate needs at least one run folder")
    runs = [(Path(r), read_run(r)[0]) for r in run_dirs]
    variables = list(dict.fromkeys(v for _, config in runs for v in config.variables))
    missing = [v for v in variables if v not in test.data_vars or f"{v}_truth" not in test]
    if missing:
        raise ValueError(f"the test data lack {missing} (or their _truth)")
    full = test.sizes["member"]
    larger = [str(r) for r, config in runs if config.members > full]
    if larger:
        raise ValueError(f"runs {larger} use more members than the test data have ({full})")
    rows: list[dict] = []
    keep = ["lead_time", *{d for _, c in runs for d in c.channel_dims}]
    names = _run_names(runs)
    forecasts = [predict_run(run_dir, test) for run_dir, _ in runs]
    for var in variables:
        truth = test[f"{var}_truth"].astype(np.float64)
        dims = _reduce_dims(truth, keep)
        for k in sorted({full, *(c.members for _, c in runs)}, reverse=True):
            ens = test[var].isel(member=slice(k))
            scores = xr.Dataset(
                {
                    "crps": metrics.crps_ensemble(truth, ens, dim=dims),
                    "rmse": metrics.ensemble_mean_rmse(truth, ens, dim=dims),
                    "spread_skill": metrics.spread_skill_ratio(truth, ens, dim=dims),
                }
            )
            rows += _rows(f"raw_{k}", k, var, scores.drop_attrs(), "ensemble standard")
        for (_, config), name, forecast in zip(runs, names, forecasts, strict=True):
            if var not in config.variables:
                continue
            mu, sigma = forecast[var]
            error2 = ((mu - truth) ** 2).mean(dims)
            scores = xr.Dataset(
                {
                    "crps": metrics.crps_gaussian(truth, mu, sigma, dim=dims),
                    "rmse": np.sqrt(error2),
                    "spread_skill": np.sqrt((sigma**2).mean(dims) / error2),
                }
            )
            rows += _rows(name, config.members, var, scores.drop_attrs(), "gaussian closed form")
    table = pd.DataFrame(rows)
    key = ["variable", *[c for c in table.columns if c in keep and c != "lead_time"], "lead_days"]
    reference = table[table.model == f"raw_{full}"].set_index(key)["crps"]
    table["crps_skill"] = 1 - table["crps"] / reference.reindex(table.set_index(key).index).values
    order = ["model", "members", *key, "crps", "crps_kind", "crps_skill", "rmse", "spread_skill"]
    return table[order]


def _run_names(runs: list[tuple[Path, RunConfig]]) -> list[str]:
    names = [f"{config.model}_{config.members}" for _, config in runs]
    return [
        f"{name}_seed{config.seed}" if names.count(name) > 1 else name
        for name, (_, config) in zip(names, runs, strict=True)
    ]
