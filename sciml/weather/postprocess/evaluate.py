"""Score post-processing runs against the raw ensemble on test data (``sciml weather evaluate``).

One row per model, variable, level and lead time, averaged over start dates and grid
points (columns in :data:`~.evaluate_rows.SCORES`); a variable without levels (a surface
field beside levelled ones) has rows with a missing (NaN) ``level``:

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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from sciml.datasets.cf import conform_units, units_of
from sciml.progress import phase
from sciml.weather import metrics
from sciml.weather.blocks import auto_block_dates
from sciml.weather.metrics.extremes import check_fraction, efi_weight, extreme_events
from sciml.weather.metrics.reliability import pit_histogram, reliability_index
from sciml.weather.postprocess.evaluate_blocks import score_blocks
from sciml.weather.postprocess.evaluate_rows import (
    ScoredRun,
    check_data,
    combined,
    name_runs,
    refuse_missing_scored,
    table_rows,
    with_seeds,
    with_skills,
)
from sciml.weather.postprocess.predict import predict_run
from sciml.weather.postprocess.record import read_run

__all__ = ["Evaluation", "evaluate_runs", "score_runs"]

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
    runs = name_runs([(Path(r), read_run(r)[0]) for r in run_dirs])
    variables = list(dict.fromkeys(v for run in runs for v in run.config.variables or ()))
    check_data(test, variables, data)
    if climate is not None:  # in the test data's units
        check_data(climate, variables, "the climate data (--climate)")
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
    table = with_skills(pd.DataFrame(rows), keep, full)
    return Evaluation(with_seeds(table, runs), histograms, "test" if climate is None else "climate")


def _score_whole(
    runs: list[ScoredRun],
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
    scored = list(zip(runs, forecasts, strict=True)) + combined(runs, forecasts)
    rows: list[dict] = []
    histograms: dict[str, dict[str, xr.DataArray]] = {}
    for number, var in enumerate(variables, start=1):
        where = f"{var} ({number}/{len(variables)} variables)"
        with phase(logger, f"{where}: reading it and its extreme events"):
            truth = test[f"{var}_truth"].astype(np.float64).load()
            ensemble = test[var].load()
            refuse_missing_scored(runs, ensemble, truth, data)
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
    return table_rows(f"raw_{k}", k, 0, var, xr.Dataset(scores), "ensemble standard")


def _model_rows(
    run: ScoredRun,
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
    return table_rows(run.name, run.config.members, run.seeds, var, xr.Dataset(scores), kind)


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
