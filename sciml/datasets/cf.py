"""The CF conventions of labelled inputs: units converted by ``cf_units``, cftime calendars.

Every workflow that reads data written by other tools compares the ``units`` attribute of
each variable (the CF convention, parsed by UDUNITS through ``cf_units``) with the units it
expects: :func:`conversion` gives the affine map between two convertible units (degrees
Celsius to kelvin, hPa to Pa) or refuses two that are not, naming both, and
:func:`conform_units` puts a dataset's variables in the expected units. A variable without
a ``units`` attribute states none and is taken to be in the expected units: only two
different labels are compared.

Times decoded by xarray are ``numpy.datetime64`` (the standard and proleptic Gregorian
calendars) or ``cftime`` objects (``noleap``, ``360_day``, ``julian``, ...):
:func:`calendar_of` names a coordinate's calendar, :func:`parse_date` reads a date in it
and :func:`date_text` writes one, so that dates are compared in their own calendar.

Missing values (CF's ``_FillValue`` and ``missing_value``, decoded to NaN by xarray) are
found by :func:`find_missing`, which says where the first one is and how many there are,
for a refusal that names them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

__all__ = [
    "Conversion",
    "UnitsMismatch",
    "calendar_of",
    "conform_units",
    "conversion",
    "date_text",
    "find_missing",
    "valid_times",
    "parse_date",
    "units_of",
]

#: The calendar of times decoded to ``numpy.datetime64`` (proleptic Gregorian).
STANDARD = "standard"
#: How a date given as text may be written (ISO 8601, to the second).
_DATE = re.compile(
    r"^(\d{1,4})-(\d{1,2})-(\d{1,2})(?:[T ](\d{1,2})(?::(\d{1,2})(?::(\d{1,2}))?)?)?$"
)


class UnitsMismatch(ValueError):
    """A variable's units cannot be converted to the units expected of it."""


def units_of(array: xr.DataArray) -> str | None:
    """The CF ``units`` attribute of ``array``, or ``None`` when it states none (or a blank)."""
    units = array.attrs.get("units")
    return None if units is None or not str(units).strip() else str(units).strip()


@dataclass(frozen=True)
class Conversion:
    """The affine map ``target = scale * source + offset`` between two units.

    Attributes:
        source: The units converted from.
        target: The units converted to.
        scale: The factor (``cf_units``'s conversion of 1 minus that of 0).
        offset: ``cf_units``'s conversion of 0.
    """

    source: str
    target: str
    scale: float
    offset: float

    def forward(self, array: xr.DataArray) -> xr.DataArray:
        """``array`` (in :attr:`source`) in :attr:`target`, lazily, its attributes kept."""
        out = array * self.scale + self.offset if self.offset else array * self.scale
        return out.assign_attrs({**array.attrs, "units": self.target})

    def back(self, array: xr.DataArray, *, difference: bool = False) -> xr.DataArray:
        """``array`` (in :attr:`target`) in :attr:`source`, its attributes kept.

        Args:
            array: Values in the target units.
            difference: The values are spreads or differences (a standard deviation):
                scaled only, never shifted.
        """
        out = array / abs(self.scale) if difference else (array - self.offset) / self.scale
        return out.assign_attrs({**array.attrs, "units": self.source})


def _unit(text: str, *, what: str) -> Any:
    from cf_units import Unit

    try:
        return Unit(text)
    except ValueError:
        raise UnitsMismatch(f"{what} states units {text!r}, which UDUNITS cannot read") from None


def conversion(
    source: str | None, target: str | None, *, what: str, reference: str
) -> Conversion | None:
    """The conversion of values in ``source`` to ``target``; ``None`` when none is needed.

    Args:
        source: The units the values state (``None``: none stated).
        target: The units expected (``None``: none expected).
        what: The values and where they come from, for messages (e.g. ``"variable 't' of
            the test data (test.nc)"``).
        reference: Whose units ``target`` are, for messages (e.g. ``"the run in R
            (--run-dir)"``).

    Returns:
        ``None`` when either side states no units or both are the same unit (``K`` and
        ``kelvin``), else the :class:`Conversion`.

    Raises:
        UnitsMismatch: Units UDUNITS cannot read, units that cannot be converted to the
            expected ones (both named), or a conversion that is not affine.
    """
    if source is None or target is None or source == target:
        return None
    have, want = _unit(source, what=what), _unit(target, what=reference)
    if have == want:
        return None
    if not have.is_convertible(want):
        raise UnitsMismatch(
            f"{what} is in {source!r}, which cannot be converted to {target!r}, the units of "
            f"{reference}"
        )
    points = np.asarray(have.convert(np.array([0.0, 1.0, 2.0]), want), dtype=np.float64)
    offset, scale = float(points[0]), float(points[1] - points[0])
    if not np.isclose(points[2], offset + 2 * scale, rtol=1e-12, atol=0.0):
        raise UnitsMismatch(f"{what}: the conversion of {source!r} to {target!r} is not affine")
    return Conversion(source, target, scale, offset)


def conform_units(
    ds: xr.Dataset,
    expected: Mapping[str, str | None],
    *,
    what: str,
    reference: str | Mapping[str, str],
) -> tuple[xr.Dataset, dict[str, Conversion]]:
    """``ds`` with each variable named in ``expected`` in those units, and the conversions.

    Args:
        ds: The data (variables of ``expected`` it lacks are left to the caller to refuse).
        expected: Units by variable name (``None``: none expected).
        what: How messages name ``ds`` (e.g. ``"the test data (test.nc)"``).
        reference: Whose units ``expected`` holds, for messages: one side for all, or one
            per variable.

    Raises:
        UnitsMismatch: As :func:`conversion`, naming the variable.
    """
    converted: dict[str, xr.DataArray] = {}
    conversions: dict[str, Conversion] = {}
    for name, target in expected.items():
        if name not in ds.data_vars:
            continue
        found = conversion(
            units_of(ds[name]),
            target,
            what=f"variable {name!r} of {what}",
            reference=reference if isinstance(reference, str) else reference[name],
        )
        if found is not None:
            converted[name] = found.forward(ds[name])
            conversions[name] = found
    return (ds.assign(converted) if converted else ds), conversions


def find_missing(ds: xr.Dataset, names: Sequence[str]) -> dict[str, str]:
    """Of the variables ``names`` of ``ds``, those with missing (NaN) values, described.

    One lazy pass counts them all; the first missing point of each variable found is
    described by its labels, e.g. ``"3 of 512 points, the first at time=2000-01-07,
    lat=70.0"``.
    """
    import dask

    counts = dask.compute(*(ds[name].isnull().sum() for name in names))
    found = {}
    for name, count in zip(names, counts, strict=True):
        if int(count):
            array = ds[name]
            first = {str(d): int(i) for d, i in array.isnull().argmax(...).items()}
            labels = ", ".join(
                f"{d}={_label(array[d].values[i]) if d in array.coords else i}"
                for d, i in first.items()
            )
            found[name] = f"{int(count)} of {array.size} points, the first at {labels}"
    return found


def _label(value: Any) -> str:
    """A coordinate label as a user reads it (dates to the minute, lead times in hours)."""
    if isinstance(value, np.timedelta64):
        return f"{value / np.timedelta64(1, 'h'):g}h"
    if isinstance(value, np.datetime64) or hasattr(value, "calendar"):
        return date_text(value)
    return str(value)


def calendar_of(values: np.ndarray) -> str | None:
    """The calendar of decoded times (``None`` for values that are not dates)."""
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.datetime64):
        return STANDARD
    if values.dtype == object and values.size and hasattr(values.flat[0], "calendar"):
        return str(values.flat[0].calendar)
    return None


def parse_date(value: Any, *, like: np.ndarray, what: str) -> Any:
    """``value`` (text, a ``datetime64`` or a date of ``like``'s kind) in ``like``'s calendar.

    Args:
        value: The date, e.g. ``"2000-02-30"`` (a day of the ``360_day`` calendar).
        like: Decoded times whose calendar the date is read in.
        what: How messages name the date (e.g. ``"val_start"``).

    Raises:
        ValueError: Not a date, or not a day of the calendar.
    """
    calendar = calendar_of(like)
    if calendar is None or np.asarray(like).dtype != object:
        try:
            date = np.datetime64(value)
        except (TypeError, ValueError):
            raise ValueError(f"{what} {value!r} is not a date (e.g. '2017-01-01T12')") from None
        if np.isnat(date):
            raise ValueError(f"{what} is NaT, expected a date")
        return date
    if hasattr(value, "calendar"):
        if value.calendar != calendar:
            raise ValueError(
                f"{what} {value} is in the {value.calendar!r} calendar, not {calendar!r}"
            )
        return value
    import cftime

    match = _DATE.match(str(value).strip())
    if match is None:
        raise ValueError(f"{what} {value!r} is not a date (e.g. '2017-01-01T12')")
    fields = [int(part) for part in match.groups(default="0")]
    try:
        return cftime.datetime(*fields, calendar=calendar)
    except ValueError as err:
        raise ValueError(
            f"{what} {value!r} is not a date of the {calendar!r} calendar ({err})"
        ) from None


def valid_times(times: xr.DataArray, steps: xr.DataArray) -> xr.DataArray:
    """``times + steps`` (a ``timedelta64`` array), for dates of any calendar.

    cftime dates add Python timedeltas, not ``numpy.timedelta64``: the steps are converted
    (to the microsecond, cftime's resolution) when the times are cftime dates.
    """
    if times.dtype == object and steps.dtype.kind == "m":
        return xr.apply_ufunc(
            lambda start, step: start + step.astype("timedelta64[us]").astype(object),
            times,
            steps,
        )
    return times + steps


def date_text(value: Any) -> str:
    """A decoded time to the minute (``2000-01-01T06:00``), in any calendar."""
    if isinstance(value, np.datetime64):
        return str(np.datetime_as_string(value, unit="m"))
    return str(value.strftime("%Y-%m-%dT%H:%M"))
