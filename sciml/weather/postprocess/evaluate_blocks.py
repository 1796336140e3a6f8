"""Block-wise scoring for :func:`~sciml.weather.postprocess.evaluate.score_runs`.

The test data are read a block of start dates (``time``) at a time: each block is loaded,
predicted, scored and released, and each score keeps sums and counts over the blocks (the
whole-file scores are means over start dates and grid points, so the mean of the sums is
the same number up to the order of the additions; histograms are added exactly). Peak
memory is set by the block, not by the file.

The two extreme-event scores need climates, which are not sums; they are built before
the scoring pass, in bounded memory (:mod:`~sciml.weather.postprocess.evaluate_climate`).

Each block's scores are computed by the same functions as the whole-file evaluation; the
rank histogram's ties are broken by the same random draws (the whole array's stream,
advanced to the block).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from sciml.progress import phase
from sciml.weather import metrics
from sciml.weather.blocks import date_blocks
from sciml.weather.metrics.reliability import pit_histogram, reliability_index
from sciml.weather.postprocess.evaluate_climate import Climate, block_climate
from sciml.weather.postprocess.evaluate_rows import (
    ScoredRun,
    combined,
    refuse_missing_scored,
    table_rows,
)
from sciml.weather.postprocess.predict import Forecast, predict_run

__all__ = ["score_blocks"]

#: Says which block and variable is read, predicted and scored (``INFO``).
logger = logging.getLogger(__name__)


# --- sums over blocks --------------------------------------------------------------------


class _Sums:
    """Sums and counts of per-point values over ``dims``, added block by block."""

    def __init__(self) -> None:
        self.sums: dict[str, xr.DataArray] = {}
        self.counts: dict[str, xr.DataArray] = {}
        self.histogram: xr.DataArray | None = None

    def add(self, name: str, values: xr.DataArray, dims: list[Hashable]) -> None:
        total, count = values.sum(dims).load(), values.count(dims).load()
        if name in self.sums:
            total, count = self.sums[name] + total, self.counts[name] + count
        self.sums[name], self.counts[name] = total, count

    def add_histogram(self, histogram: xr.DataArray) -> None:
        histogram = histogram.load()
        if self.histogram is None:
            self.histogram = histogram
        else:
            self.histogram = (self.histogram + histogram).assign_attrs(histogram.attrs)
            self.histogram.name = histogram.name

    def mean(self, name: str) -> xr.DataArray:
        """The mean over every block: NaN where no value counted (as ``mean`` gives)."""
        count = self.counts[name]
        return self.sums[name].where(count > 0) / count.where(count > 0)


def _averages(sums: _Sums, crps: xr.DataArray, target: _Block) -> None:
    sums.add("crps", crps, target.dims)
    sums.add("crps_efi", crps * target.weight, target.dims)
    sums.add("crps_extreme", crps.where(target.extreme), target.dims)


@dataclass
class _Block:
    """One variable's truth on a block of dates and what every forecast is scored with."""

    truth: xr.DataArray
    extreme: xr.DataArray
    weight: xr.DataArray
    dims: list[Hashable]
    dates: slice  # the block's dates in the test data
    total_dates: int


def _draws(truth: xr.DataArray, block: _Block, seed: int) -> np.ndarray:
    """The draws :func:`~sciml.weather.metrics.rank_histogram` makes for the block's points.

    It draws one uniform number per point of the whole file, in C order of the truth, from
    one stream; the block's points are runs of that stream, reached by advancing it.
    """
    axis = truth.dims.index("time")
    outer = int(np.prod(truth.shape[:axis]))
    inner = int(np.prod(truth.shape[axis + 1 :]))
    runs = []
    for index in range(outer):
        generator = np.random.PCG64(seed)
        generator.advance((index * block.total_dates + block.dates.start) * inner)
        runs.append(np.random.Generator(generator).random(truth.sizes["time"] * inner))
    return np.concatenate(runs).reshape(truth.shape) if runs else np.empty(truth.shape)


def _rank_histogram(truth: xr.DataArray, ens: xr.DataArray, block: _Block) -> xr.DataArray:
    """The rank histogram of the block, ties broken as the whole file's are."""
    histogram = metrics.rank_histogram(truth, ens, dim=block.dims)
    ordered = ens.transpose(*truth.dims, "member").values
    observed = truth.values
    ties = (ordered == observed[..., None]).sum(-1)
    if not ties.any():  # the draws play no part
        return histogram
    below = (ordered < observed[..., None]).sum(-1)
    rank = 1.0 + below + np.floor(_draws(truth, block, seed=0) * (ties + 1))
    invalid = np.isnan(observed) | np.isnan(ordered).any(-1)
    ranks = truth.copy(data=np.where(invalid, np.nan, rank))
    counts = (ranks == histogram["rank"]).sum(block.dims)
    return histogram.copy(data=counts.transpose(*histogram.dims).values)


def _raw_block(sums: _Sums, ens: xr.DataArray, block: _Block) -> None:
    truth, dims = block.truth, block.dims
    _averages(sums, metrics.crps_ensemble(truth, ens, dim=[]), block)
    error2 = (ens.astype(np.float64).mean("member") - truth) ** 2
    sums.add("error2", error2, dims)
    sums.add("variance", ens.astype(np.float64).var("member", ddof=1).where(error2.notnull()), dims)
    sums.add_histogram(_rank_histogram(truth, ens, block))


def _model_block(
    sums: _Sums, forecast: tuple[xr.DataArray, xr.DataArray], block: _Block, bins: int
) -> None:
    (mu, sigma), truth, dims = forecast, block.truth, block.dims
    _averages(sums, metrics.crps_gaussian(truth, mu, sigma, dim=[]), block)
    sums.add("error2", (mu - truth) ** 2, dims)
    sums.add("sigma2", sigma**2, dims)
    sums.add_histogram(pit_histogram(truth, mu, sigma, bins=bins, dim=dims))


def _raw_scores(sums: _Sums, members: int) -> xr.Dataset:
    assert sums.histogram is not None
    error2 = sums.mean("error2")
    ratio = (sums.mean("variance") / error2) ** 0.5 * np.sqrt((members + 1) / members)
    return xr.Dataset(
        {name: sums.mean(name) for name in ("crps", "crps_efi", "crps_extreme")}
        | {
            "rmse": error2**0.5,
            "spread_skill": ratio,
            "reliability": reliability_index(sums.histogram),
        }
    )


def _model_scores(sums: _Sums) -> xr.Dataset:
    assert sums.histogram is not None
    error2 = sums.mean("error2")
    return xr.Dataset(
        {name: sums.mean(name) for name in ("crps", "crps_efi", "crps_extreme")}
        | {
            "rmse": np.sqrt(error2),
            "spread_skill": np.sqrt(sums.mean("sigma2") / error2),
            "reliability": reliability_index(sums.histogram),
        }
    )


def _loaded(forecast: Forecast) -> Forecast:
    """A block's forecast computed (not a graph that the sums would keep)."""
    return {var: (mu.load(), sigma.load()) for var, (mu, sigma) in forecast.items()}


def score_blocks(
    runs: list[ScoredRun],
    test: xr.Dataset,
    *,
    variables: list[str],
    keep: list[str],
    reference: xr.Dataset,
    extreme_fraction: float,
    block: int,
    data: str,
) -> tuple[list[dict], dict[str, dict[str, xr.DataArray]]]:
    """The rows and histograms of :func:`~.evaluate.score_runs`, a block of dates at a time."""
    full = test.sizes["member"]
    ks = sorted({full, *(run.config.members for run in runs)}, reverse=True)
    blocks = date_blocks(test.sizes["time"], block)
    size = min(block, test.sizes["time"])
    for run in runs:  # a run refuses the data (grid, units, missing values) before any pass
        _loaded(predict_run(run.path, test.isel(time=slice(0, 1)), data=data))
    with tempfile.TemporaryDirectory(prefix="sciml-evaluate-") as folder:
        climates: dict[str, Climate] = {}
        for number, var in enumerate(variables, start=1):
            what = f"{var} ({number}/{len(variables)} variables)"
            sizes = f"{len(blocks)} block{'s' if len(blocks) > 1 else ''} of {size} dates"
            with phase(logger, f"{what}: its climates and extreme events ({sizes})"):
                dims = [d for d in test[f"{var}_truth"].dims if d not in keep]
                climates[var] = block_climate(
                    test,
                    reference,
                    var,
                    dims=dims,
                    fraction=extreme_fraction,
                    block=block,
                    scratch=Path(folder),
                    budget=block * 8 * test[var].size // test.sizes["time"],
                )
        raw: dict[tuple[str, int], _Sums] = {}
        models: dict[tuple[str, str], _Sums] = {}
        order: list[ScoredRun] = []
        for number, part in enumerate(blocks, start=1):
            dates = f"dates {part.start + 1}-{part.stop} of {test.sizes['time']}"
            names = ", ".join(run.name for run in runs)
            with phase(
                logger, f"block {number}/{len(blocks)} ({dates}): predicting {names}, scoring"
            ):
                chunk = test.isel(time=part)
                forecasts = [_loaded(predict_run(run.path, chunk, data=data)) for run in runs]
                scored = list(zip(runs, forecasts, strict=True)) + combined(runs, forecasts)
                order = [run for run, _ in scored]
                del forecasts
                for var in variables:
                    truth = chunk[f"{var}_truth"].astype(np.float64).load()
                    ensemble = chunk[var].load()
                    refuse_missing_scored(runs, ensemble, truth, data)
                    climate = climates[var]
                    target = _Block(
                        truth,
                        climate.extreme(truth),
                        climate.weight(part, truth),
                        [d for d in truth.dims if d not in keep],
                        part,
                        test.sizes["time"],
                    )
                    for k in ks:
                        sums = raw.setdefault((var, k), _Sums())
                        _raw_block(sums, ensemble.isel(member=slice(k)), target)
                    for run, forecast in scored:
                        if var in (run.config.variables or ()):
                            sums = models.setdefault((var, run.name), _Sums())
                            _model_block(sums, forecast[var], target, full + 1)
                del scored
    rows: list[dict] = []
    histograms: dict[str, dict[str, xr.DataArray]] = {}
    for var in variables:
        for k in ks:
            sums = raw[(var, k)]
            assert sums.histogram is not None
            histograms.setdefault(f"raw_{k}", {})[var] = sums.histogram
            scores = _raw_scores(sums, k)
            rows += table_rows(f"raw_{k}", k, 0, var, scores, "ensemble standard")
        for run in order:
            if var not in (run.config.variables or ()):
                continue
            sums = models[(var, run.name)]
            assert sums.histogram is not None
            name = run.group or run.name
            previous = histograms.setdefault(name, {}).get(var)
            hist = sums.histogram
            histograms[name][var] = hist if previous is None else previous + hist
            scores = _model_scores(sums)
            kind = "gaussian closed form"
            rows += table_rows(run.name, run.config.members, run.seeds, var, scores, kind)
    return rows, histograms
