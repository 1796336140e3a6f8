"""Block-wise scoring for :func:`~sciml.weather.postprocess.evaluate.score_runs`.

The test data are read a block of start dates (``time``) at a time: each block is loaded,
predicted, scored and released, and each score keeps sums and counts over the blocks (the
whole-file scores are means over start dates and grid points, so the mean of the sums is
the same number up to the order of the additions; histograms are added exactly). Peak
memory is set by the block, not by the file.

The two extreme-event scores need climates (:mod:`sciml.weather.metrics.extremes`), which
are not sums; they are built before the scoring pass, in bounded memory:

* the truth's climatology (mean over the climate's start dates) is a sum and a count per
  point, one pass over the climate's truth;
* the threshold of the most extreme events, a quantile of ``|anomaly|`` over start dates
  and grid points per lead time (and level), is exact in bounded memory: a pass over the
  test truth writes the anomalies to the scratch folder, and each row's quantile is
  narrowed down on disk (:class:`sciml.weather.disk_quantiles.DiskQuantiles`), so that
  neither the file's size nor ``extreme_fraction`` sets the memory;
* the EFI weight compares each point's members with the model climate of that point (every
  member of every climate start date). The climate's ensemble (and the test's, when the
  climate is other data) is written once to a scratch folder (``TMPDIR``) grouped by grid
  point, a slab of points per file, so that each slab's climate can be read whole and
  sorted; the weights are written there too and read back a block at a time. The scratch
  folder holds about a copy of the ensembles and is removed at the end.

Each block's scores are computed by the same functions as the whole-file evaluation; the
rank histogram's ties are broken by the same random draws (the whole array's stream,
advanced to the block).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from sciml.progress import phase
from sciml.weather import metrics
from sciml.weather.blocks import date_blocks
from sciml.weather.disk_quantiles import DiskQuantiles
from sciml.weather.metrics.alignment import align_to
from sciml.weather.metrics.kernels import efi_array
from sciml.weather.metrics.reliability import pit_histogram, reliability_index
from sciml.weather.postprocess.predict import Forecast, predict_run

if TYPE_CHECKING:
    from sciml.weather.postprocess.evaluate import _Run

__all__ = ["score_blocks"]


def _undated(values: xr.DataArray) -> xr.DataArray:
    """Without the coordinates along ``time`` or ``member`` (as the model climate stacks them)."""
    dated = [name for name, c in values.coords.items() if {"time", "member"} & set(c.dims)]
    return values.drop_vars(dated)


def _template(values: xr.DataArray) -> xr.DataArray:
    """One start date (and member) of ``values``, undated: the labels a climate is aligned to."""
    one = _undated(values).isel({d: 0 for d in ("time", "member") if d in values.dims})
    return one.drop_vars([d for d in ("time", "member") if d in one.coords])


# --- the extremes' climates --------------------------------------------------------------


class _Slabs:
    """Arrays ``(dates, width, points)`` on disk, one file per slab of points.

    Written a block of dates at a time (or a slab whole), read a slab at a time (or a block
    of dates of every slab).
    """

    def __init__(self, folder: Path, name: str, points: int, slab: int) -> None:
        self.paths = [folder / f"{name}_{i}.bin" for i in range(math.ceil(points / slab))]
        self.slices = [slice(i * slab, min((i + 1) * slab, points)) for i in range(len(self.paths))]
        self.dates = 0
        self.dtype: np.dtype | None = None
        self.width = 0

    def append(self, values: np.ndarray) -> None:
        """Add the ``(dates, width, points)`` values of a block of dates."""
        self.dtype, self.width = values.dtype, values.shape[1]
        self.dates += values.shape[0]
        for path, part in zip(self.paths, self.slices, strict=True):
            with path.open("ab") as file:
                np.ascontiguousarray(values[:, :, part]).tofile(file)

    def write(self, index: int, values: np.ndarray) -> None:
        """Write slab ``index`` whole: ``(dates, width, points of the slab)``."""
        self.dtype, self.width, self.dates = values.dtype, values.shape[1], values.shape[0]
        values.tofile(self.paths[index])

    def slab(self, index: int) -> np.ndarray:
        """Slab ``index``: ``(dates, width, points of the slab)``."""
        points = self.slices[index].stop - self.slices[index].start
        values = np.fromfile(self.paths[index], dtype=self.dtype)
        return values.reshape(self.dates, self.width, points)

    def rows(self, dates: slice) -> np.ndarray:
        """Every point of the dates ``dates`` (width 1 arrays): ``(dates, points)``."""
        parts = []
        for path, part in zip(self.paths, self.slices, strict=True):
            points = part.stop - part.start
            start = dates.start * points * np.dtype(self.dtype).itemsize
            count = (dates.stop - dates.start) * points
            parts.append(np.fromfile(path, dtype=self.dtype, count=count, offset=start))
            parts[-1] = parts[-1].reshape(dates.stop - dates.start, points)
        return np.concatenate(parts, axis=1)


def _points(values: xr.DataArray, template: xr.DataArray) -> np.ndarray:
    """A block's values as ``(time, member, points)``, points in ``template``'s dim order."""
    return np.asarray(values.transpose("time", "member", *template.dims).values).reshape(
        values.sizes["time"], values.sizes["member"], -1
    )


@dataclass
class _Climate:
    """One variable's extremes: climatology, extreme thresholds and |EFI| on disk."""

    climatology: xr.DataArray  # per point (no time), aligned to the test truth
    threshold: xr.DataArray  # per row (lead time, level)
    efi: _Slabs  # |EFI| per test date and point, width 1
    points: xr.DataArray  # the template of the EFI's points (the test ensemble, undated)

    def extreme(self, truth: xr.DataArray) -> xr.DataArray:
        anomaly = abs(truth - self.climatology)
        return (anomaly >= self.threshold).rename("extreme")

    def weight(self, dates: slice, truth: xr.DataArray) -> xr.DataArray:
        values = self.efi.rows(dates).reshape(dates.stop - dates.start, *self.points.shape)
        dims = ("time", *self.points.dims)
        coords = {d: truth[d] for d in dims if d in truth.coords}
        weight = xr.DataArray(values, dims=dims, coords=coords, name="efi_weight")
        return weight.transpose(*[d for d in truth.dims if d in weight.dims])


def _climate(
    test: xr.Dataset,
    reference: xr.Dataset,
    var: str,
    *,
    dims: list[Hashable],
    fraction: float,
    block: int,
    scratch: Path,
    budget: int,
) -> _Climate:
    """``var``'s climatology, extreme thresholds and |EFI| weights, in bounded memory.

    ``budget``: the bytes of a slab of points' climate and test ensembles (float64); the
    block's ensemble in float64, so that the EFI takes about the scoring's memory.
    """
    from sciml.weather.metrics.extremes import _check_same_dims

    truth_name = f"{var}_truth"
    _check_same_dims(test[truth_name], reference[truth_name], "truth", "climate truth")
    _check_same_dims(test[var], reference[var], "forecasts", "climate")
    points = _template(test[var])
    truth_points = _template(test[truth_name])
    same = reference is test
    clim_dates, test_dates = reference.sizes["time"], test.sizes["time"]
    clim_members, test_members = reference.sizes["member"], test.sizes["member"]
    per_point = 8 * (clim_dates * clim_members + test_dates * test_members)
    slab = max(1, budget // per_point)
    climate = _Slabs(scratch, f"{var}_climate", points.size, slab)
    ensemble = climate if same else _Slabs(scratch, f"{var}_test", points.size, slab)
    total: xr.DataArray | None = None
    count: xr.DataArray | None = None
    for part in date_blocks(clim_dates, block):
        chunk = reference.isel(time=part)
        truth = _undated(chunk[truth_name]).astype(np.float64).load()
        truth = align_to(truth_points, truth, ("truth", "climate truth"))
        total = truth.sum("time") if total is None else total + truth.sum("time")
        count = truth.count("time") if count is None else count + truth.count("time")
        members = align_to(
            points, _undated(chunk[var]).load(), ("forecasts", "climate"), skip="member"
        )
        climate.append(_points(members, points))
    if not same:
        for part in date_blocks(test_dates, block):
            ensemble.append(_points(_undated(test[var].isel(time=part)).load(), points))
    assert total is not None and count is not None
    climatology = total.where(count > 0) / count.where(count > 0)  # NaN where none, as mean
    climatology = align_to(test[truth_name], climatology, ("truth", "climate truth"))
    efi = _Slabs(scratch, f"{var}_efi", points.size, slab)
    for index in range(len(climate.slices)):
        sample = climate.slab(index)  # (dates, members, points)
        sample = np.moveaxis(sample, 2, 0).reshape(sample.shape[2], -1)
        forecasts = np.moveaxis(ensemble.slab(index), 1, 2)  # (dates, points, members)
        efi.write(index, abs(efi_array(forecasts, sample))[:, None, :])
        del sample, forecasts
    rows = [d for d in test[truth_name].dims if d not in dims]
    shape = [test[truth_name].sizes[d] for d in rows]
    anomalies = DiskQuantiles(
        scratch, f"{var}_anomaly", math.prod(shape), 1 - fraction, budget=max(2, budget // 8)
    )
    for part in date_blocks(test_dates, block):
        truth = test[truth_name].isel(time=part).astype(np.float64).load()
        anomaly = abs(truth - climatology).transpose(*rows, *dims)
        anomalies.add(anomaly.values.reshape(math.prod(shape), -1))
    coords = {d: test[truth_name][d] for d in rows if d in test[truth_name].coords}
    threshold = xr.DataArray(anomalies.quantiles().reshape(shape), dims=rows, coords=coords)
    return _Climate(climatology, threshold, efi, points)


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
    runs: list[_Run],
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
    from sciml.weather.postprocess.evaluate import _combined, _rows, logger

    full = test.sizes["member"]
    ks = sorted({full, *(run.config.members for run in runs)}, reverse=True)
    blocks = date_blocks(test.sizes["time"], block)
    size = min(block, test.sizes["time"])
    for run in runs:  # a run refuses the data (grid, units, missing values) before any pass
        _loaded(predict_run(run.path, test.isel(time=slice(0, 1)), data=data))
    with tempfile.TemporaryDirectory(prefix="sciml-evaluate-") as folder:
        climates: dict[str, _Climate] = {}
        for number, var in enumerate(variables, start=1):
            what = f"{var} ({number}/{len(variables)} variables)"
            sizes = f"{len(blocks)} block{'s' if len(blocks) > 1 else ''} of {size} dates"
            with phase(logger, f"{what}: its climates and extreme events ({sizes})"):
                dims = [d for d in test[f"{var}_truth"].dims if d not in keep]
                climates[var] = _climate(
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
        order: list[_Run] = []
        for number, part in enumerate(blocks, start=1):
            dates = f"dates {part.start + 1}-{part.stop} of {test.sizes['time']}"
            names = ", ".join(run.name for run in runs)
            with phase(
                logger, f"block {number}/{len(blocks)} ({dates}): predicting {names}, scoring"
            ):
                chunk = test.isel(time=part)
                forecasts = [_loaded(predict_run(run.path, chunk, data=data)) for run in runs]
                scored = list(zip(runs, forecasts, strict=True)) + _combined(runs, forecasts)
                order = [run for run, _ in scored]
                del forecasts
                for var in variables:
                    truth = chunk[f"{var}_truth"].astype(np.float64).load()
                    ensemble = chunk[var].load()
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
            rows += _rows(f"raw_{k}", k, 0, var, scores, "ensemble standard")
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
            rows += _rows(run.name, run.config.members, run.seeds, var, scores, kind)
    return rows, histograms
