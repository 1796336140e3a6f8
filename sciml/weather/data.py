"""Open ensemble forecasts lazily with the project's dimension names.

Files in netCDF, Zarr or GRIB (through cfgrib, the optional extra ``sciml[grib]``) become
one Dask-backed :class:`xarray.Dataset` with dimensions ``member``, ``time``, ``lead_time``
(when the files hold several forecast steps), ``level``, ``lat``, ``lon``:

* ``number``/``realization``/``ensemble_member`` -> ``member``;
* ``isobaricInhPa``/``pressure_level``/``plev`` -> ``level``;
* ``latitude``/``longitude`` -> ``lat``/``lon``;
* ``step`` (cfgrib's forecast step, also in the ENS-10 GRIB files) -> ``lead_time``;
  ``valid_time`` stays a coordinate (``time + lead_time``), or becomes ``time`` when the
  file has no separate initial time (ERA5 from the CDS API).

ENS-10 (Ashkboos et al. 2022) ships GRIB files decoded by cfgrib, so the same mapping
applies to it. Coordinates must be strictly monotonic, and every file must share one grid.

The rest of the contract of an ensemble input (the README's "Inputs"):

* fields (variables with a ``member``, ``lat`` or ``lon`` dim) must have ``lat`` and
  ``lon``; other variables (a scalar ``crs``, ``time_bnds``) are carried along unchecked,
  and a variable not asked for is never refused;
* units (the CF ``units`` attribute): a variable is in one unit across files and a
  ``<v>_truth`` in its forecast's: convertible units are converted (``cf_units``), others
  refused naming both (:mod:`sciml.datasets.cf`); a variable stating none is taken to be
  in the units of the others;
* calendars: ``time`` may be in any CF calendar (cftime dates for ``noleap``, ``360_day``,
  ``julian``, ...), compared and split in its own; files in different calendars are
  refused (:func:`check_calendars`);
* emptiness: a field with no values along a dim (0 members, dates, levels, points) is
  refused naming the file and the dim;
* missing values (NaN, CF's ``_FillValue``): a command refuses them before writing
  anything (:func:`refuse_missing`) unless it masks them (``sciml weather train
  --missing mask``).
"""

from __future__ import annotations

import glob
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from sciml.datasets.cf import (
    calendar_of,
    conform_units,
    find_missing,
    units_of,
    valid_times,
)
from sciml.datasets.store import MANIFEST, check_blosc_chunks, check_store, is_zarr_store
from sciml.io_utils import small_chunk_cache

#: Source name -> project name, for dimensions and their coordinates.
NAME_MAP: dict[str, str] = {
    "number": "member",
    "realization": "member",
    "ensemble_member": "member",
    "isobaricInhPa": "level",
    "pressure_level": "level",
    "plev": "level",
    "latitude": "lat",
    "longitude": "lon",
    "step": "lead_time",
}
#: A variable with one of these dims is a field of the ensemble, checked when opened; the
#: others (a scalar ``crs``, ``time_bnds``) are carried along unchecked.
FIELD_DIMS = ("member", "lat", "lon")
#: Canonical order of the dimensions of every variable.
DIM_ORDER: tuple[str, ...] = ("member", "time", "lead_time", "level", "lat", "lon")
GRIB_SUFFIXES = (".grib", ".grb", ".grib1", ".grib2", ".grb2")

__all__ = [
    "asked_for",
    "check_calendars",
    "open_ensemble",
    "refuse_missing",
    "standardise_names",
]


def _expand(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    found: list[Path] = []
    for item in items:
        text = str(item)
        matches = sorted(glob.glob(text)) if glob.has_magic(text) else [text]
        if not matches:
            raise FileNotFoundError(f"no file matches {text!r}")
        for match in matches:
            path = Path(match)
            if not path.exists():
                raise FileNotFoundError(f"ensemble file not found: {path}")
            found.append(path)
    if not found:
        raise ValueError("open_ensemble needs at least one path")
    return found


def _open_one(path: Path) -> xr.Dataset:
    if path.suffix == ".zarr" or is_zarr_store(path):
        if (path / MANIFEST).exists():  # a training store (sciml weather rechunk): checked
            check_store(path)
        else:  # another tool's: its Blosc chunks are whole (16 bytes read a chunk)
            check_blosc_chunks(path)
        return xr.open_zarr(path, chunks={})
    if path.suffix.lower() in GRIB_SUFFIXES:
        try:
            import cfgrib  # noqa: F401
        except ImportError as err:
            raise ImportError(
                f"reading GRIB file {path} needs cfgrib: pip install 'sciml[grib]' "
                "(cfgrib and the ecCodes library)"
            ) from err
        return xr.open_dataset(path, engine="cfgrib", chunks={}, indexpath="")
    with small_chunk_cache():
        return xr.open_dataset(path, chunks={})


def standardise_names(ds: xr.Dataset, *, source: str = "dataset") -> xr.Dataset:
    """Rename ERA5/cfgrib/ENS-10 dimensions and coordinates to the project's names.

    Args:
        ds: Dataset with source names.
        source: Name used in error messages (e.g. the file).

    Returns:
        The dataset with ``member``, ``time``, ``lead_time``, ``level``, ``lat``, ``lon``.
    """
    renames = {old: new for old, new in NAME_MAP.items() if old in ds.variables or old in ds.dims}
    clashes = [new for old, new in renames.items() if new in ds.variables or new in ds.dims]
    if clashes:
        raise ValueError(f"{source}: both source and project names present for {clashes}")
    ds = ds.rename(renames)
    if "time" not in ds.dims and "valid_time" in ds.dims:
        ds = ds.rename({"valid_time": "time"})
    for name in ("member", "time", "lead_time", "level"):
        if name in ds.coords and name not in ds.dims and ds[name].ndim == 0:
            # one member, date, step or level stored as a scalar coordinate (cfgrib does this
            # for files holding a single one, as in ENS-10): keep it as a dimension so that
            # files combine along it
            ds = ds.expand_dims(name)
    if "valid_time" in ds.coords and ds["valid_time"].ndim == 0:
        valid = valid_times(ds["time"], ds["lead_time"]) if "lead_time" in ds.dims else ds["time"]
        ds = ds.drop_vars("valid_time").assign_coords(valid_time=valid)
    return ds


def _check_monotonic(ds: xr.Dataset, source: str) -> None:
    for name in ("time", "lead_time", "level", "lat", "lon", "member"):
        if name not in ds.dims or name not in ds.coords or ds.sizes[name] < 2:
            continue
        values = ds[name].values
        # neighbours compared, not differences: cftime dates step by datetime.timedelta
        after, before = values[1:], values[:-1]
        if not (np.all(after > before) or np.all(after < before)):
            raise ValueError(
                f"{source}: coordinate {name!r} is not strictly monotonic "
                f"(first values {values[:5].tolist()}); sort it or drop duplicates first"
            )


def check_calendars(named: Mapping[str, xr.Dataset]) -> None:
    """The ``time`` coordinates of inputs compared with each other share one calendar.

    Args:
        named: Each input by how messages name it (e.g. its file).

    Raises:
        ValueError: Two calendars, naming both inputs, the coordinate and the calendars.
    """
    calendars = {
        what: calendar_of(ds["time"].values)
        for what, ds in named.items()
        if "time" in ds.coords and ds["time"].size
    }
    if len(set(calendars.values())) > 1:
        shown = ", ".join(f"{what}: {calendar!r}" for what, calendar in calendars.items())
        raise ValueError(
            f"the 'time' coordinates are in different calendars ({shown}); dates of two "
            "calendars are not comparable: convert them to one calendar first"
        )


def refuse_missing(ds: xr.Dataset, names: Sequence[str], *, advice: str) -> None:
    """Refuse ``ds`` when a variable of ``names`` has missing (NaN) values, before any write.

    Args:
        ds: The data.
        names: The variables a command reads.
        advice: What changes it (e.g. the option that masks them).

    Raises:
        ValueError: Naming each such variable, its file, how many points are missing and
            the first of them, and ``advice``.
    """
    found = find_missing(ds, names)
    if found:
        files = {name: ds[name].encoding.get("source") for name in found}
        shown = "; ".join(
            f"{name!r}" + (f" of {files[name]}" if files[name] else "") + f": {text}"
            for name, text in found.items()
        )
        raise ValueError(f"missing (NaN) values in {shown}; nothing was written: {advice}")


def _check_same_grid(datasets: Sequence[xr.Dataset], paths: Sequence[Path]) -> None:
    first = datasets[0]
    check_calendars({str(path): ds for ds, path in zip(datasets, paths, strict=True)})
    for ds, path in zip(datasets[1:], paths[1:], strict=True):
        for name in ("lat", "lon", "level"):
            if (name in first.coords) != (name in ds.coords):
                raise ValueError(f"{path}: coordinate {name!r} differs from {paths[0]}")
            if name in first.coords and not np.array_equal(first[name].values, ds[name].values):
                raise ValueError(
                    f"{path}: its {name!r} grid ({ds.sizes.get(name)} values, "
                    f"{ds[name].values[:3].tolist()}...) differs from {paths[0]} "
                    f"({first.sizes.get(name)} values, {first[name].values[:3].tolist()}...); "
                    "regrid the files to one grid first"
                )


def _conform_units(datasets: Sequence[xr.Dataset], paths: Sequence[Path]) -> list[xr.Dataset]:
    """Each variable in one unit across the files, a ``<v>_truth`` in its forecast ``v``'s.

    A variable's units are those the first file stating any gives it (its forecast's for
    a truth); convertible units elsewhere are converted to them, others refused
    (:func:`sciml.datasets.cf.conform_units`).
    """
    stated: dict[str, tuple[str, str]] = {}
    for ds, path in zip(datasets, paths, strict=True):
        for name, var in ds.data_vars.items():
            units = units_of(var)
            if units is not None:
                stated.setdefault(str(name), (units, f"{name!r} in {path}"))
    for name in list(stated):
        forecast = name.removesuffix("_truth")
        if forecast != name and forecast in stated:
            stated[name] = stated[forecast]
    expected = {name: units for name, (units, _) in stated.items()}
    reference = {name: where for name, (_, where) in stated.items()}
    return [
        conform_units(ds, expected, what=str(path), reference=reference)[0]
        for ds, path in zip(datasets, paths, strict=True)
    ]


def _names(values: Hashable | Iterable[Hashable]) -> list[Hashable]:
    """A list of labels; one string (or number) is one label, not a sequence of characters."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        return [values]
    return list(values)


def _select(ds: xr.Dataset, dim: str, wanted: Sequence[Hashable] | None, what: str) -> xr.Dataset:
    if wanted is None:
        return ds
    if dim not in ds.dims:
        raise ValueError(f"cannot select {what}: the data have no {dim!r} dimension")
    wanted = _names(wanted)
    repeated = sorted({value for value in wanted if wanted.count(value) > 1}, key=str)
    if repeated:
        raise ValueError(f"{what} {repeated} asked for more than once")
    available = ds[dim].values.tolist()
    missing = [value for value in wanted if value not in available]
    if missing:
        raise ValueError(f"{what} {missing} not in the data; available: {available}")
    return ds.sel({dim: list(wanted)})


def asked_for(variables: Sequence[str] | None) -> list[str] | None:
    """The variables a command reads when it is given ``variables``: each and its truth.

    ``None`` (no variables given: the command reads every field) stays ``None``.
    """
    if variables is None:
        return None
    return [name for var in variables for name in (var, f"{var}_truth")]


def open_ensemble(
    paths: str | Path | Iterable[str | Path],
    *,
    variables: Sequence[str] | None = None,
    levels: Sequence[float] | None = None,
    members: Sequence[int] | None = None,
    chunks: Mapping[str, int] | str | None = None,
    checked: Sequence[str] | None = None,
) -> xr.Dataset:
    """Open ensemble files as one lazy dataset with the project's dimension names.

    Args:
        paths: A file, a glob pattern, or several of them (netCDF, ``.zarr``, GRIB).
            Several files are combined by their coordinates (e.g. consecutive times, or
            one variable per file).
        variables: Data variables to keep (default: all).
        levels: Pressure levels to keep, in the files' units (hPa for ERA5).
        members: Member labels to keep (e.g. ``range(5)`` for members 0-4 of 10).
        chunks: Dask chunks by project dimension name (default: the files' own chunks,
            one per file for netCDF).
        checked: The variables a command reads, whose dims are checked (default: every
            field kept, a variable with a ``member``, ``lat`` or ``lon`` dim); the others
            are kept unchecked.

    Returns:
        A Dask-backed dataset whose variables have dimensions in the order
        ``member, time, lead_time, level, lat, lon`` (those present).

    Raises:
        FileNotFoundError: A path does not exist.
        ImportError: A GRIB file without cfgrib installed.
        ValueError: Missing variables, levels, members or dimensions, mismatched grids,
            non-monotonic coordinates.
    """
    files = _expand(paths)
    if variables is not None:
        variables = [str(name) for name in _names(variables)]
    datasets = []
    for path in files:
        ds = standardise_names(_open_one(path), source=str(path))
        if variables is not None:
            missing = [name for name in variables if name not in ds.data_vars]
            if missing and len(files) == 1:
                raise ValueError(
                    f"{path}: variable(s) {missing} not found; available: {list(ds.data_vars)}"
                )
            ds = ds[[name for name in variables if name in ds.data_vars]]
        for name, var in ds.data_vars.items():
            field = bool(set(FIELD_DIMS) & set(var.dims))
            if not (field if checked is None else name in checked):
                continue
            if "lat" not in var.dims or "lon" not in var.dims:
                raise ValueError(
                    f"{path}: variable {name!r} has dimensions {var.dims}; expected 'lat' and "
                    "'lon' (or 'latitude'/'longitude') among them"
                )
            empty = [str(dim) for dim in var.dims if var.sizes[dim] == 0]
            if empty:
                raise ValueError(
                    f"{path}: variable {name!r} has no values along {empty} (sizes "
                    f"{dict(var.sizes)}); the file is empty there: write or select it again"
                )
        _check_monotonic(ds, str(path))
        for var in ds.data_vars.values():
            # errors name the file of a variable (Zarr stores record no source themselves)
            var.encoding.setdefault("source", str(path))
        datasets.append(ds)
    _check_same_grid(datasets, files)
    datasets = _conform_units(datasets, files)
    combined = datasets[0]
    if len(datasets) > 1:
        combined = xr.combine_by_coords(  # type: ignore[assignment]
            datasets,
            combine_attrs="drop_conflicts",
            data_vars="all",
            join="exact",
            compat="no_conflicts",
        )
    if variables is not None:
        missing = [name for name in variables if name not in combined.data_vars]
        if missing:
            raise ValueError(
                f"variable(s) {missing} not found in {[str(f) for f in files]}; "
                f"available: {list(combined.data_vars)}"
            )
    _check_monotonic(combined, "combined files")
    combined = _select(combined, "level", levels, "levels")
    if "member" in combined.coords and combined.sizes.get("member", 0) > 1:
        # members by label: "the first k members" of a file stored in descending order are
        # those of the same file stored ascending (raw_k and every run took others)
        combined = combined.sortby("member")
    combined = _select(combined, "member", members, "members")
    if chunks is not None:
        combined = combined.chunk(chunks)
    order = [name for name in DIM_ORDER if name in combined.dims]
    return combined.transpose(*order, ...)
