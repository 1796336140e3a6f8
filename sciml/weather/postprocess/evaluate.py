"""Score post-processing runs against the raw ensemble on test data (``sciml weather evaluate``).

One row per model, variable, level and lead time, averaged over start dates and grid
points (columns in :data:`SCORES`); a variable without levels (a surface field beside
levelled ones) has rows with a missing (NaN) ``level``:

* ``crps`` and ``crps_kind``: ``ensemble standard`` (the empirical CRPS of the members) for
  the raw ensembles, ``gaussian closed form`` for EMOS and the deep models;
* ``crps_efi``: ENS-10's EFI-weighted CRPS (Ashkboos et al. 2022), ``mean(|EFI| * CRPS)``
  with the EFI of the raw full ensemble, the same weights for every model
  (:mod:`sciml.weather.metrics.extremes`);
* ``crps_extreme``: the CRPS on the 5 % (``extreme_fraction``) of start dates and grid
  points where the truth's anomaly is largest in magnitude, chosen per variable, level and
  lead time;
* ``*_skill``: ``1 - score / score(raw_M)``, against the raw full ensemble;
* ``rmse`` of the mean and ``spread_skill`` (the raw ensembles' with the (M+1)/M
  correction; for a Gaussian, the RMS of sigma over the RMSE of mu);
* ``reliability``: the reliability index of the rank histogram (raw ensembles, M + 1 ranks)
  or of the PIT histogram (Gaussian models, with the M + 1 bins of the raw full
  ensemble's ranks), 0 when flat (:mod:`sciml.weather.metrics.reliability`).

Both extreme-event scores need climates, per lead time and grid point: given ``climate``
(e.g. the training data) its start dates define them, else the test data's own start
dates do (a coarse climate for a small test set; :attr:`Evaluation.climate` says which).

The test data are read a block of start dates at a time (``block_dates``, ``sciml weather
evaluate --block-dates``; :mod:`~sciml.weather.postprocess.evaluate_blocks`): the same
scores, to the rounding of sums taken in another order, in memory set by the block, not by
the file; ``block_dates=0`` holds the whole file.

Rows ``raw_M`` (every member of the test data) and ``raw_k`` (the first ``k``, for each
``k`` the runs use) are always included. A run's row is named ``<model>_<k>``; runs whose
configurations differ only by the seed are one model: each seed keeps its row
(``<model>_<k>_seed<s>``, ``seeds`` = 1) and the row ``<model>_<k>`` holds the mean over
the seeds, with ``<score>_std`` columns for their standard deviation (ddof=1, NaN for one
seed) and ``seeds`` their number (0 for the raw ensembles). The row
``<model>_<k>_combined`` scores the seeds' forecasts combined into one
(:func:`~sciml.weather.postprocess.predict.combine_seeds`: the Gaussian whose quantiles are
the means of theirs), the forecast a seed ensemble issues; its CRPS is at most the seeds'
mean. Runs of the same model and ``k`` that differ otherwise are named after the
values of the options in which they differ, ``<model>_<k>_<option><value>`` (e.g.
``pooled_5_lr0.003`` and ``pooled_5_lr0.001``, ``-`` between several).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from sciml.datasets.cf import conform_units, units_of
from sciml.progress import phase
from sciml.training.runs.record import config_record
from sciml.weather import metrics
from sciml.weather.blocks import auto_block_dates
from sciml.weather.metrics.extremes import check_fraction, efi_weight, extreme_events
from sciml.weather.metrics.reliability import pit_histogram, reliability_index
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.evaluate_blocks import score_blocks
from sciml.weather.postprocess.predict import Forecast, combine_seeds, predict_run
from sciml.weather.postprocess.train import read_run

__all__ = ["SCORES", "Evaluation", "evaluate_runs", "predict_run", "score_runs"]

#: Score columns: each has a ``<score>_std`` over seeds.
SCORES = (
    "crps",
    "crps_skill",
    "crps_efi",
    "crps_efi_skill",
    "crps_extreme",
    "crps_extreme_skill",
    "rmse",
    "spread_skill",
    "reliability",
)
SKILLS = {"crps_skill": "crps", "crps_efi_skill": "crps_efi", "crps_extreme_skill": "crps_extreme"}

#: Says which run is predicted and which forecast scored (``INFO``, :mod:`sciml.progress`).
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evaluation:
    """The score table, the rank/PIT histograms and which dates defined the climates.

    Attributes:
        table: One row per model, variable, level and lead time (module docstring).
        histograms: Per model (raw and aggregated rows, not the single seeds) and variable,
            the counts along ``rank`` (raw) or ``bin`` (PIT), per lead time (and level);
            a model trained with several seeds holds the sum of its seeds' counts.
        climate: ``"climate"`` (the dates given) or ``"test"`` (the test dates).
    """

    table: pd.DataFrame
    histograms: dict[str, dict[str, xr.DataArray]]
    climate: str


@dataclass(frozen=True)
class _Target:
    """One variable's truth and what every forecast of it is scored with."""

    truth: xr.DataArray
    extreme: xr.DataArray  # the extreme events (bool)
    weight: xr.DataArray  # |EFI| of the raw full ensemble
    dims: list[Hashable]  # averaged over
    bins: int  # of the PIT histograms: the raw full ensemble's ranks

    def averages(self, crps: xr.DataArray) -> dict[str, xr.DataArray]:
        """The averages of a per-point CRPS: plain, EFI-weighted, on the extreme points."""
        return {
            "crps": crps.mean(self.dims),
            "crps_efi": (crps * self.weight).mean(self.dims),
            "crps_extreme": crps.where(self.extreme).mean(self.dims),
        }


@dataclass(frozen=True)
class _Run:
    path: Path
    config: PostprocessConfig
    name: str
    group: str | None  # the aggregated row's name when the run is one of several seeds
    seeds: int = 1  # the seeds a forecast combines


def _name_runs(runs: list[tuple[Path, PostprocessConfig]]) -> list[_Run]:
    """Name each run; runs that differ only by seed share a group (the module docstring)."""
    groups: dict[PostprocessConfig, list[tuple[Path, PostprocessConfig]]] = {}
    for path, config in runs:
        groups.setdefault(replace(config, train=replace(config.train, seed=0)), []).append(
            (path, config)
        )
    bases = {key: f"{key.model}_{key.members}" for key in groups}
    names = dict(bases)
    for base in set(bases.values()):
        alike = [key for key in groups if bases[key] == base]
        if len(alike) > 1:
            names |= {
                key: f"{base}_{part}" for key, part in zip(alike, _distinct(alike), strict=True)
            }
    named: list[_Run] = []
    for key, members in groups.items():
        seeds = [config.train.seed for _, config in members]
        if len(set(seeds)) < len(seeds):
            paths = [str(path) for path, _ in members]
            raise ValueError(f"runs {paths} have the same configuration and seed: pass one of them")
        single = len(members) == 1
        for path, config in members:
            run_name = names[key] if single else f"{names[key]}_seed{config.train.seed}"
            named.append(_Run(path, config, run_name, None if single else names[key]))
    if len({run.name for run in named}) < len(named):
        raise ValueError(
            f"runs {[str(r.path) for r in named]} give ambiguous names; rename a folder"
        )
    return named


def _distinct(configs: list[PostprocessConfig]) -> list[str]:
    """Each configuration's values of the fields in which they differ, e.g. ``lr0.003-epochs30``."""
    flat = [
        {k: v for k, v in config_record(c).items() if k != "train"} | config_record(c)["train"]
        for c in configs
    ]
    fields = [f for f in flat[0] if len({repr(values[f]) for values in flat}) > 1]

    def text(value: object) -> str:
        if isinstance(value, (tuple, list)):
            return ",".join(map(str, value))
        return str(value)

    return ["-".join(f"{f}{text(values[f])}" for f in fields) for values in flat]


def _check_data(test: xr.Dataset, variables: list[str], what: str) -> None:
    missing = [v for v in variables if v not in test.data_vars or f"{v}_truth" not in test]
    if missing:
        raise ValueError(f"{what} lack {missing} (or their _truth)")
    for var in variables:
        absent = [d for d in ("member", "time", "lead_time") if d not in test[var].dims]
        if absent:
            raise ValueError(f"{var} of {what} has no {absent} dimension(s): {test[var].dims}")


def _combined(runs: list[_Run], forecasts: list[Forecast]) -> list[tuple[_Run, Forecast]]:
    """Each seed group's forecasts combined into one, as a run named ``<group>_combined``."""
    groups: dict[str, list[int]] = {}
    for index, run in enumerate(runs):
        if run.group is not None:
            groups.setdefault(run.group, []).append(index)
    out = []
    for group, indices in groups.items():
        first = runs[indices[0]]
        run = _Run(first.path, first.config, f"{group}_combined", None, seeds=len(indices))
        out.append((run, combine_seeds([forecasts[i] for i in indices])))
    return out


def _rows(
    name: str, members: int, seeds: int, var: str, scores: xr.Dataset, kind: str
) -> list[dict]:
    rows = []
    for record in scores.drop_attrs().to_dataframe().reset_index().to_dict("records"):
        lead = record.pop("lead_time")
        days = lead if isinstance(lead, float) else pd.Timedelta(lead) / pd.Timedelta(days=1)
        rows.append(
            {"model": name, "members": members, "seeds": seeds, "variable": var}
            | {"lead_days": days, **record, "crps_kind": kind}
        )
    return rows


def score_runs(
    run_dirs: Sequence[Path | str],
    test: xr.Dataset,
    *,
    climate: xr.Dataset | None = None,
    extreme_fraction: float = 0.05,
    data: str = "the test data",
    block_dates: int | None = None,
) -> Evaluation:
    """The score table and histograms (module docstring) of runs and raw ensembles on ``test``.

    Args:
        run_dirs: Run folders of ``sciml weather train``.
        test: Test ensemble with ``<variable>_truth``; one variable at a time is loaded.
        climate: Ensemble (with truth) of other start dates, on the test data's lead times
            and grid, defining the model climate and the truth's climatology (default: the
            test data).
        extreme_fraction: Share of each row's points that count as extreme events.
        data: How error messages name ``test`` (e.g. the file).
        block_dates: Start dates read, predicted and scored at a time
            (:mod:`~sciml.weather.postprocess.evaluate_blocks`; the same scores in memory
            set by the block); None: as many as
            :data:`~sciml.weather.blocks.BLOCK_BYTES` allows; 0: the
            whole file at once.

    Raises:
        ValueError: Runs of other variables than ``test`` (or ``climate``) holds, runs of
            more members than it has, runs that cannot be told apart, or no run.
        sciml.weather.labels.LabelMismatch: ``test`` on another grid than a run's, or with
            levels or lead times it never saw
            (:func:`~sciml.weather.postprocess.predict.predict_run`
            aligns the rest by label).
    """
    if not run_dirs:
        raise ValueError("evaluate needs at least one run folder")
    check_fraction(extreme_fraction)
    runs = _name_runs([(Path(r), read_run(r)[0]) for r in run_dirs])
    variables = list(dict.fromkeys(v for run in runs for v in run.config.variables or ()))
    _check_data(test, variables, data)
    if climate is not None:  # in the test data's units
        _check_data(climate, variables, "the climate data (--climate)")
        names = [name for var in variables for name in (var, f"{var}_truth")]
        climate, _ = conform_units(
            climate,
            {name: units_of(test[name]) for name in names},
            what="the climate data (--climate)",
            reference=data,
        )
    full = test.sizes["member"]
    larger = [str(run.path) for run in runs if run.config.members > full]
    if larger:
        raise ValueError(f"runs {larger} use more members than the test data have ({full})")
    keep = ["lead_time", *{d for run in runs for d in run.config.channel_dims}]
    reference = test if climate is None else climate
    if block_dates is None:
        block_dates = auto_block_dates(test, variables)
    if block_dates < 0:
        raise ValueError(f"block_dates must be >= 0 (0: the whole file), got {block_dates}")
    if block_dates:
        rows, histograms = score_blocks(
            runs,
            test,
            variables=variables,
            keep=keep,
            reference=reference,
            extreme_fraction=extreme_fraction,
            block=block_dates,
            data=data,
        )
    else:
        rows, histograms = _score_whole(
            runs, test, variables, keep, reference, extreme_fraction, data
        )
    table = _with_skills(pd.DataFrame(rows), keep, full)
    return Evaluation(
        _with_seeds(table, runs), histograms, "test" if climate is None else "climate"
    )


def _score_whole(
    runs: list[_Run],
    test: xr.Dataset,
    variables: list[str],
    keep: list[str],
    reference: xr.Dataset,
    extreme_fraction: float,
    data: str,
) -> tuple[list[dict], dict[str, dict[str, xr.DataArray]]]:
    """The rows and histograms with the whole test file in memory (``block_dates=0``)."""
    full = test.sizes["member"]
    forecasts = []
    for number, run in enumerate(runs, start=1):
        with phase(logger, f"predicting {run.name} ({number}/{len(runs)} runs, {run.path})"):
            forecasts.append(predict_run(run.path, test, data=data))
    scored = list(zip(runs, forecasts, strict=True)) + _combined(runs, forecasts)
    rows: list[dict] = []
    histograms: dict[str, dict[str, xr.DataArray]] = {}
    for number, var in enumerate(variables, start=1):
        where = f"{var} ({number}/{len(variables)} variables)"
        with phase(logger, f"{where}: reading it and its extreme events"):
            truth = test[f"{var}_truth"].astype(np.float64).load()
            ensemble = test[var].load()
            dims = [d for d in truth.dims if d not in keep]
            climate_truth = reference[f"{var}_truth"]
            target = _Target(
                truth,
                extreme_events(truth, climate_truth, dim=dims, fraction=extreme_fraction),
                efi_weight(ensemble, reference[var]),
                dims,
                full + 1,
            )
        for k in sorted({full, *(run.config.members for run in runs)}, reverse=True):
            with phase(logger, f"{where}: scoring raw_{k}"):
                rows += _raw_rows(ensemble.isel(member=slice(k)), var, target, histograms)
        for run, forecast in scored:
            if var in (run.config.variables or ()):
                with phase(logger, f"{where}: scoring {run.name}"):
                    rows += _model_rows(run, var, forecast[var], target, histograms)
    return rows, histograms


def _raw_rows(
    ens: xr.DataArray, var: str, target: _Target, histograms: dict[str, dict[str, xr.DataArray]]
) -> list[dict]:
    """A raw ensemble's rows for ``var``; its rank histogram joins ``histograms``."""
    truth, dims, k = target.truth, target.dims, ens.sizes["member"]
    hist = metrics.rank_histogram(truth, ens, dim=dims)
    scores = target.averages(metrics.crps_ensemble(truth, ens, dim=[])) | {
        "rmse": metrics.ensemble_mean_rmse(truth, ens, dim=dims),
        "spread_skill": metrics.spread_skill_ratio(truth, ens, dim=dims),
        "reliability": reliability_index(hist),
    }
    histograms.setdefault(f"raw_{k}", {})[var] = hist
    return _rows(f"raw_{k}", k, 0, var, xr.Dataset(scores), "ensemble standard")


def _model_rows(
    run: _Run,
    var: str,
    forecast: tuple[xr.DataArray, xr.DataArray],
    target: _Target,
    histograms: dict[str, dict[str, xr.DataArray]],
) -> list[dict]:
    """A Gaussian run's rows for ``var``; its PIT histogram joins ``histograms``."""
    (mu, sigma), truth, dims = forecast, target.truth, target.dims
    error2 = ((mu - truth) ** 2).mean(dims)
    hist = pit_histogram(truth, mu, sigma, bins=target.bins, dim=dims)
    scores = target.averages(metrics.crps_gaussian(truth, mu, sigma, dim=[])) | {
        "rmse": np.sqrt(error2),
        "spread_skill": np.sqrt((sigma**2).mean(dims) / error2),
        "reliability": reliability_index(hist),
    }
    name = run.group or run.name
    previous = histograms.setdefault(name, {}).get(var)
    histograms[name][var] = hist if previous is None else previous + hist
    kind = "gaussian closed form"
    return _rows(run.name, run.config.members, run.seeds, var, xr.Dataset(scores), kind)


def _with_skills(table: pd.DataFrame, keep: list[str], full: int) -> pd.DataFrame:
    """Add each ``*_skill`` column against the ``raw_<full>`` row of the same key."""
    key = ["variable", *[c for c in table.columns if c in keep and c != "lead_time"], "lead_days"]
    index = table.set_index(key).index
    raw = table[table.model == f"raw_{full}"].set_index(key)
    for skill, score in SKILLS.items():
        table[skill] = 1 - table[score] / raw[score].reindex(index).to_numpy()
    order = ["model", "members", "seeds", *key, "crps_kind"]
    return table[order + list(SCORES)]


def _with_seeds(table: pd.DataFrame, runs: list[_Run]) -> pd.DataFrame:
    """Append each seed group's mean row, with ``<score>_std`` columns over its seeds."""
    for score in SCORES:
        table[f"{score}_std"] = np.nan
    groups = {run.group: [r.name for r in runs if r.group == run.group] for run in runs}
    key = [c for c in table.columns if c not in (*SCORES, "model", "seeds") and "_std" not in c]
    parts = [table]
    for group, names in groups.items():
        if group is None:
            continue
        seeds = table[table.model.isin(names)]
        grouped = seeds.groupby(key, sort=False, dropna=False)[list(SCORES)]
        mean, std = grouped.mean(), grouped.std(ddof=1).add_suffix("_std")
        rows = mean.join(std).reset_index().assign(model=group, seeds=len(names))
        parts.append(rows[table.columns])
    return pd.concat(parts, ignore_index=True)


def evaluate_runs(
    run_dirs: Sequence[Path | str],
    test: xr.Dataset,
    *,
    climate: xr.Dataset | None = None,
    extreme_fraction: float = 0.05,
    block_dates: int | None = None,
) -> pd.DataFrame:
    """The score table of :func:`score_runs` (see the module docstring)."""
    return score_runs(
        run_dirs,
        test,
        climate=climate,
        extreme_fraction=extreme_fraction,
        block_dates=block_dates,
    ).table
