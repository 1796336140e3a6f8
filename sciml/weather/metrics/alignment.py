"""The input contract and output labelling shared by the metrics of :mod:`.metrics`.

Inputs must line up; nothing is broadcast silently:

* observations have exactly the forecasts' dimensions without ``member_dim``
  (observations indexed by valid time are put on the forecasts' start time and lead time
  with :func:`sciml.weather.verify.at_valid_time`);
* coordinates shared by observations and forecasts hold the same labels: the same labels in
  another order are aligned by label, anything else (another grid, other dates, another
  level) is an error naming both sides; so are different ``units``;
* ``dim`` names dimensions of the score; ``weights`` are a DataArray, finite, non-negative,
  not all zero, whose dimensions are among the reduced ones, on the same coordinates
  (they are checked eagerly: weights are small, one value per latitude or so).

Every output says what it is: :func:`label` names a DataArray after its score and gives it
(or each variable of a Dataset) ``long_name`` and ``units``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar, cast

import dask
import numpy as np
import xarray as xr

XArray = TypeVar("XArray", xr.DataArray, xr.Dataset)
Labelled = TypeVar("Labelled", bound=xr.DataArray | xr.Dataset)
Param = TypeVar("Param")
Dim = Hashable | Sequence[Hashable] | None

__all__ = [
    "Dim",
    "XArray",
    "align_to",
    "check_member_dim",
    "check_pair",
    "check_parameter",
    "check_units",
    "check_xarray",
    "is_lazy",
    "label",
    "reduce_over",
    "reduced_dims",
    "single_member_chunk",
]


def is_lazy(*objs: object) -> bool:
    """Whether any of ``objs`` is Dask-backed."""
    return any(dask.is_dask_collection(obj) for obj in objs)


def check_xarray(name: str, value: object) -> None:
    """Refuse anything but a DataArray or Dataset, naming the argument."""
    if not isinstance(value, xr.DataArray | xr.Dataset):
        raise TypeError(
            f"{name} must be an xarray DataArray or Dataset (labelled dimensions), "
            f"got {type(value).__name__}"
        )


def check_member_dim(forecasts: XArray, member_dim: str, *, at_least: int = 1) -> None:
    """Forecasts must have ``member_dim`` with at least ``at_least`` members."""
    check_xarray("forecasts", forecasts)
    if member_dim not in forecasts.dims:
        raise ValueError(
            f"forecasts have no member dimension {member_dim!r}; their dimensions are "
            f"{tuple(forecasts.dims)} (pass member_dim=...; sciml weather score: --member-dim)"
        )
    members = forecasts.sizes[member_dim]
    if members < at_least:
        raise ValueError(
            f"this score needs at least {at_least} member(s) along {member_dim!r}, "
            f"the forecasts have {members}"
        )


def _describe_index(index: object) -> str:
    values = np.asarray(index)
    if values.size <= 4:
        return f"{values.tolist()}"
    return f"{values.size} labels {values[0]} .. {values[-1]}"


def align_to(
    reference: xr.DataArray | xr.Dataset,
    other: Labelled,
    names: tuple[str, str],
    *,
    skip: Hashable = None,
) -> Labelled:
    """``other`` on the coordinates of ``reference``: the same labels in any order, or an error.

    Shared dimensions must have the same size and, where both are labelled, the same set
    of labels (``other`` is then reordered by label); shared non-index coordinates (a
    ``valid_time``, a scalar ``level``) must be equal.
    """
    ref_name, other_name = names
    for dim in set(reference.dims) & set(other.dims):
        if dim == skip:
            continue
        if dim in reference.indexes and dim in other.indexes:
            want, have = reference.indexes[dim], other.indexes[dim]
            if want.equals(have):
                continue
            if (
                want.is_unique
                and have.is_unique
                and len(want) == len(have)
                and want.isin(have).all()
            ):
                other = cast(Labelled, other.reindex({dim: want}))
                continue
            raise ValueError(
                f"{dim!r} coordinates differ: {ref_name} have {_describe_index(want)}, "
                f"{other_name} have {_describe_index(have)}; select the same points on both "
                "sides first (.sel, .reindex or .interp; on the command line, regrid one of "
                "the files)"
            )
        if reference.sizes[dim] != other.sizes[dim]:
            raise ValueError(
                f"dimension {dim!r} has size {reference.sizes[dim]} in {ref_name} and "
                f"{other.sizes[dim]} in {other_name}"
            )
    for name in set(reference.coords) & set(other.coords):
        if name == skip or name in reference.dims or name in other.dims:
            continue
        want, have = reference.coords[name].variable, other.coords[name].variable
        if set(want.dims) != set(have.dims) or not want.transpose(*have.dims).equals(have):
            raise ValueError(
                f"coordinate {name!r} differs between {ref_name} ({_describe_index(want.values)}) "
                f"and {other_name} ({_describe_index(have.values)})"
            )
    return other


def _variables(value: object) -> list[tuple[Hashable, xr.DataArray]]:
    if isinstance(value, xr.Dataset):
        return list(value.data_vars.items())
    return [(None, value)] if isinstance(value, xr.DataArray) else []


def check_units(**named: object) -> None:
    """Inputs of one variable must state the same ``units`` (where they state any)."""
    found: dict[Hashable, dict[str, str]] = {}
    for name, value in named.items():
        for key, variable in _variables(value):
            if "units" in variable.attrs:
                found.setdefault(key, {})[name] = str(variable.attrs["units"])
    for key, units in found.items():
        if len(set(units.values())) > 1:
            what = "" if key is None else f" of {key!r}"
            raise ValueError(f"units{what} differ: {units}; convert to the same units first")


def check_pair(
    observations: XArray, forecasts: XArray, member_dim: str, *, at_least: int = 1
) -> XArray:
    """Check observations against an ensemble; return the forecasts aligned by label."""
    check_xarray("observations", observations)
    check_member_dim(forecasts, member_dim, at_least=at_least)
    if member_dim in observations.dims:
        raise ValueError(
            f"observations must not have the member dimension {member_dim!r}; "
            f"their dimensions are {tuple(observations.dims)}"
        )
    expected = set(forecasts.dims) - {member_dim}
    if set(observations.dims) != expected:
        missing = sorted(map(str, expected - set(observations.dims)))
        extra = sorted(map(str, set(observations.dims) - expected))
        hint = (
            " (observations indexed by valid time: sciml.weather.verify.at_valid_time)"
            if "lead_time" in missing
            else ""
        )
        raise ValueError(
            f"observations have dimensions {tuple(observations.dims)}, forecasts "
            f"{tuple(forecasts.dims)}: expected the forecasts' dimensions without "
            f"{member_dim!r} (missing {missing}, extra {extra}); nothing is broadcast{hint}"
        )
    check_units(observations=observations, forecasts=forecasts)
    return align_to(observations, forecasts, ("observations", "forecasts"), skip=member_dim)


def reduced_dims(score: XArray, dim: Dim) -> list[Hashable]:
    """The dimensions ``dim`` names (None: all of the score's), each one of the score's."""
    if dim is None:
        return list(score.dims)
    dims = [dim] if isinstance(dim, str) or not isinstance(dim, Sequence) else list(dim)
    missing = [name for name in dims if name not in score.dims]
    if missing:
        raise ValueError(
            f"dim {missing} not among the score's dimensions {tuple(score.dims)} "
            "(the member dimension is reduced by the score itself)"
        )
    return dims


def _check_weights(score: XArray, dims: list[Hashable], weights: object) -> xr.DataArray:
    if not isinstance(weights, xr.DataArray):
        raise TypeError(f"weights must be an xarray DataArray, got {type(weights).__name__}")
    outside = [name for name in weights.dims if name not in dims]
    if outside:
        raise ValueError(
            f"weights have dimensions {list(weights.dims)}, but only {dims} are averaged "
            f"over: {outside} would not be reduced (weights apply to the averaged dimensions)"
        )
    weights = align_to(score, weights, ("the score", "weights"))
    values = weights.values  # weights are small (e.g. one per latitude)
    if not np.isfinite(values).all() or (values < 0).any():
        raise ValueError("weights must be finite and non-negative (got NaN, inf or < 0)")
    if not values.any():
        raise ValueError("weights are all zero")
    return weights


def reduce_over(score: XArray, dim: Dim, weights: xr.DataArray | None) -> XArray:
    """Average ``score`` over ``dim`` (weighted by checked ``weights`` when given)."""
    dims = reduced_dims(score, dim)
    if weights is not None:
        weights = _check_weights(score, dims, weights)
    if not dims:
        return score
    if weights is None:
        return score.mean(dims)
    return score.weighted(weights).mean(dims)


def label(result: XArray, *sources: object, name: str, what: str, units: str | None) -> XArray:
    """Name ``result`` and set its ``long_name`` and ``units`` (None: the data's units).

    The variable described and the data's units are taken from the first of ``sources``
    (labelled inputs, matched by variable name for Datasets) that states them.
    """

    def attrs(key: Hashable) -> dict[str, str]:
        variables = [
            variable
            for source in sources
            for var_key, variable in _variables(source)
            if var_key == key or var_key is None or key is None
        ]
        described = next(
            (
                str(v.attrs.get("long_name") or v.name)
                for v in variables
                if v.attrs.get("long_name") or v.name
            ),
            "the data",
        )
        out = {"long_name": f"{what} of {described}"}
        unit = units or next((str(v.attrs["units"]) for v in variables if "units" in v.attrs), None)
        return out if unit is None else {**out, "units": unit}

    if isinstance(result, xr.Dataset):
        result = result.copy()
        for key in result.data_vars:
            result[key].attrs = attrs(key)
        result.attrs = {}
        return result
    result = result.rename(name)
    result.attrs = attrs(None)
    return result


def single_member_chunk(forecasts: XArray, member_dim: str) -> XArray:
    """Dask inputs rechunked to one chunk along ``member_dim`` (others unchanged)."""
    return forecasts.chunk({member_dim: -1}) if is_lazy(forecasts) else forecasts


def check_parameter(name: str, value: Param, observations: XArray) -> Param:
    """A number, or labelled values on the observations' coordinates with no extra dimension."""
    if isinstance(value, xr.DataArray | xr.Dataset):
        extra = [d for d in value.dims if d not in observations.dims]
        if extra:
            raise ValueError(
                f"{name} has dimensions {extra} that the observations {tuple(observations.dims)} "
                "lack; nothing is broadcast"
            )
        return cast(Param, align_to(observations, value, ("observations", name)))
    if not np.isscalar(value) or isinstance(value, str | bytes):
        raise TypeError(
            f"{name} must be a number or an xarray DataArray/Dataset, got {type(value).__name__}"
        )
    return value
