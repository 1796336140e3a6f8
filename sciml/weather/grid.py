"""The grid and data a weather run was trained on, and new data aligned to it by label.

:func:`forecast_variables` and :func:`static_variables` name the fields of an ensemble that
a run reads (forecasts with a truth, static fields on the grid).

A run folder records (:func:`data_record`, kept in its configuration file) the variables,
the ensemble size, the spatial dims in their order, the labels of every spatial and
channel dim (``lat``, ``lon``, ``level``) and of ``lead_time``, and a fingerprint of the
training start dates, as :mod:`sciml.training.runs.record` describes. :func:`align_to_run` puts new
data on that grid: latitudes that run the other way (north to south, as ERA5's do),
longitudes in the other convention (-180..180 against 0..360), levels in another order and
spatial dims in another order are reordered to the run's, so that weights per grid point
or per channel meet the points and channels they were trained on; other labels (another
grid, a level or lead time the run never saw) are refused, naming both sides.
:meth:`Aligned.restore` puts a result back on the data's own order.

The record also keeps each variable's CF ``units`` (those of the forecasts and of the static
fields the run reads). New data in other units that convert to them (degrees Celsius for
kelvin) are converted before the run sees them, and :meth:`Aligned.in_data_units` puts
a result back in the data's own units; units that do not convert are refused, naming both
(:mod:`sciml.datasets.cf`). A side that states no units (a run recorded before runs
recorded them, data without the attribute) is taken to be in the other side's.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from sciml.datasets.cf import Conversion, conform_units, units_of
from sciml.weather.labels import LabelMismatch, coordinate_record, match_labels

__all__ = [
    "SAMPLE_DIMS",
    "Aligned",
    "align_to_run",
    "data_record",
    "forecast_variables",
    "spatial_dims",
    "static_variables",
]

MEMBER = "member"
#: The dims along which an ensemble's samples run: start date and lead time.
SAMPLE_DIMS = ("time", "lead_time")
#: Periods of labels that wrap around (longitudes in degrees).
PERIODS = {"lon": 360.0}


def forecast_variables(ds: xr.Dataset, *, member_dim: str = "member") -> list[str]:
    """Variables with members and a ``<variable>_truth``, in the dataset's order."""
    return [
        str(name)
        for name, var in ds.data_vars.items()
        if member_dim in var.dims and f"{name}_truth" in ds.data_vars
    ]


def static_variables(ds: xr.Dataset, *, member_dim: str = "member") -> list[str]:
    """Fields on the grid without members and sample dims (e.g. ``topography``).

    A variable off the grid (a scalar ``crs``, bounds) is no static field.
    """
    varying = {member_dim, *SAMPLE_DIMS}
    return [
        str(name)
        for name, var in ds.data_vars.items()
        if not varying & set(var.dims) and {"lat", "lon"} <= set(var.dims)
    ]


def spatial_dims(var: xr.DataArray, channel_dims: Sequence[str]) -> list[str]:
    """The dims of ``var`` beside members, start dates, lead times and channel dims, in order."""
    return [str(d) for d in var.dims if d not in (MEMBER, *SAMPLE_DIMS, *channel_dims)]


def _labels(ds: xr.Dataset, dim: str) -> np.ndarray | None:
    return ds[dim].values if dim in ds.coords else None


def data_record(
    ds: xr.Dataset,
    variables: Sequence[str],
    *,
    channel_dims: Sequence[str],
    static: Sequence[str] = (),
) -> dict[str, Any]:
    """What new data must share with the training data ``ds`` (see the module docstring).

    Args:
        ds: The training data.
        variables: The forecast variables the run reads.
        channel_dims: The dims folded into channels.
        static: The static fields the run reads.
    """
    spatial = spatial_dims(ds[variables[0]], channel_dims)
    dims = [*spatial, *(d for d in channel_dims if d in ds.dims), "lead_time"]
    coords = {d: coordinate_record(_labels(ds, d), size=ds.sizes[d]) for d in dims if d in ds.dims}
    time = coordinate_record(_labels(ds, "time"), size=ds.sizes.get("time", 0), values_up_to=0)
    return {
        "members": ds.sizes.get(MEMBER, 0),
        "spatial": spatial,
        "coords": coords,
        "time": time,
        "units": {name: units_of(ds[name]) for name in (*variables, *static)},
    }


@dataclass(frozen=True)
class Aligned:
    """Data on a run's grid, and the positions that put it there.

    Attributes:
        data: The data, reordered to the run's labels and spatial dim order, in the run's
            units.
        positions: Per reordered dim, the positions in the original data of the run's
            labels.
        conversions: Per converted variable, the conversion from the data's units to the
            run's.
    """

    data: xr.Dataset
    positions: dict[str, np.ndarray]
    conversions: dict[str, Conversion] = field(default_factory=dict)

    def restore(self, result: xr.DataArray, dims: Sequence[Hashable]) -> xr.DataArray:
        """``result`` (on :attr:`data`'s order) back on the original data's order and ``dims``."""
        back = {d: np.argsort(p) for d, p in self.positions.items() if d in result.dims}
        return result.isel(back).transpose(*dims)

    def in_data_units(
        self, name: str, result: xr.DataArray, *, difference: bool = False
    ) -> xr.DataArray:
        """``result`` for variable ``name``, in the run's units, in the data's own units.

        Args:
            name: The variable ``result`` is a forecast of.
            result: Values in the run's units.
            difference: ``result`` is a spread (a standard deviation): scaled, not shifted.
        """
        found = self.conversions.get(name)
        return result if found is None else found.back(result, difference=difference)


def align_to_run(
    ds: xr.Dataset, record: dict[str, Any], *, run: str, data: str = "the data"
) -> Aligned:
    """``ds`` on the grid a run recorded, or an error naming both sides.

    Args:
        ds: New data (test or prediction data).
        record: The run's :func:`data_record`.
        run: How messages name the run (its folder).
        data: How messages name the data (e.g. ``"the test data (test.nc)"``).

    Raises:
        LabelMismatch: A dim the run recorded is missing from ``ds``, or its labels are
            not the run's (lead times: not among the run's).
        sciml.datasets.cf.UnitsMismatch: A variable in units that do not convert to those
            the run recorded (both named).
    """
    sides = (f"the run in {run} (--run-dir)", data)
    positions: dict[str, np.ndarray] = {}
    for dim, recorded in record["coords"].items():
        if dim not in ds.dims:
            raise LabelMismatch(
                f"{data} has no {dim!r} dimension ({dict(ds.sizes)}); {sides[0]} was "
                f"trained on data with one, of size {recorded['size']}"
            )
        labels = _labels(ds, dim)
        found = match_labels(
            recorded,
            ds.sizes[dim] if labels is None else labels,
            dim=dim,
            sides=sides,
            period=PERIODS.get(dim),
            subset=dim == "lead_time",
        )
        if not np.array_equal(found, np.arange(found.size)):
            positions[dim] = found
    aligned = ds.isel(positions) if positions else ds
    spatial = [d for d in record["spatial"] if d in aligned.dims]
    converted, conversions = conform_units(
        aligned, record.get("units", {}), what=data, reference=sides[0]
    )
    return Aligned(converted.transpose(..., *spatial), positions, conversions)
