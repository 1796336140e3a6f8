"""The extreme-event climates of a block-wise evaluation (:mod:`.evaluate_blocks`).

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
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from sciml.weather.blocks import date_blocks
from sciml.weather.disk_quantiles import DiskQuantiles
from sciml.weather.metrics.alignment import align_to
from sciml.weather.metrics.kernels import efi_array

__all__ = ["Climate", "block_climate"]


def _undated(values: xr.DataArray) -> xr.DataArray:
    """Without the coordinates along ``time`` or ``member`` (as the model climate stacks them)."""
    dated = [name for name, c in values.coords.items() if {"time", "member"} & set(c.dims)]
    return values.drop_vars(dated)


def _template(values: xr.DataArray) -> xr.DataArray:
    """One start date (and member) of ``values``, undated: the labels a climate is aligned to."""
    one = _undated(values).isel({d: 0 for d in ("time", "member") if d in values.dims})
    return one.drop_vars([d for d in ("time", "member") if d in one.coords])


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
class Climate:
    """One variable's extremes: climatology, extreme thresholds and ``|EFI|`` on disk."""

    climatology: xr.DataArray  # per point (no time), aligned to the test truth
    threshold: xr.DataArray  # per row (lead time, level)
    efi: _Slabs  # |EFI| per test date and point, width 1
    points: xr.DataArray  # the template of the EFI's points (the test ensemble, undated)

    def extreme(self, truth: xr.DataArray) -> xr.DataArray:
        """Where ``truth`` is an extreme event: its anomaly at least the row's threshold."""
        anomaly = abs(truth - self.climatology)
        return (anomaly >= self.threshold).rename("extreme")

    def weight(self, dates: slice, truth: xr.DataArray) -> xr.DataArray:
        """The ``|EFI|`` weights of the test dates ``dates``, on ``truth``'s dims and labels."""
        values = self.efi.rows(dates).reshape(dates.stop - dates.start, *self.points.shape)
        dims = ("time", *self.points.dims)
        coords = {d: truth[d] for d in dims if d in truth.coords}
        weight = xr.DataArray(values, dims=dims, coords=coords, name="efi_weight")
        return weight.transpose(*[d for d in truth.dims if d in weight.dims])


def block_climate(
    test: xr.Dataset,
    reference: xr.Dataset,
    var: str,
    *,
    dims: list[Hashable],
    fraction: float,
    block: int,
    scratch: Path,
    budget: int,
) -> Climate:
    """``var``'s climatology, extreme thresholds and ``|EFI|`` weights, in bounded memory.

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
    return Climate(climatology, threshold, efi, points)
