"""Variants of a valid input as other tools write them, each with what must hold.

One function per variant kind. A function takes a valid input (an :class:`xarray.Dataset`
with the project's names, a file or a frame) and returns the variant and an
:class:`Expect`: the same answer within a bound derived from the change (a reordering's
float64 noise, a units conversion's rounding, int16 packing's quantisation step) or a
refusal that names the file. The bounds are on the *inputs' values*; the test modules carry
them to the scores they compare (a CRPS, an RMSE and a spread move by at most as much as
every member and the truth do).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

#: float64's relative rounding.
EPS = float(np.finfo(np.float64).eps)
#: Aliases other tools write for each project dimension (the readers map them back).
ALIASES: dict[str, tuple[str, ...]] = {
    "member": ("number", "realization", "ensemble_member"),
    "level": ("isobaricInhPa", "pressure_level", "plev"),
    "lat": ("latitude",),
    "lon": ("longitude",),
    "lead_time": ("step",),
}
#: Calendars in which every date of the synthetic ensembles exists.
CALENDARS = ("noleap", "360_day", "julian", "all_leap", "proleptic_gregorian", "standard")
#: Units of a temperature in kelvin and the factor a difference in them is multiplied by.
UNITS: dict[str, float] = {"degC": 1.0, "degF": 1.8, "mK": 1000.0, "K": 1.0}


@dataclass(frozen=True)
class Expect:
    """What must hold for a variant.

    Attributes:
        refuse: The command must refuse it, naming the file, leaving every file as it was.
        grid: The variant is on another grid (coordinates shifted): a command that compares
            it with a run's grid aligns it by label or refuses it naming the file.
        bound: Largest change of any value of a field (in the input's units): a score that
            moves by at most as much as its values (CRPS, RMSE, spread) moves by at most this.
        lossy: The values changed (beyond float64 noise): ratios and fitted runs are not
            compared, only the scores ``bound`` holds for.
        scale: Differences in the variant's units per difference in the input's (degF: 1.8).
    """

    refuse: bool = False
    grid: bool = False
    bound: float = 0.0
    lossy: bool = False
    scale: float = 1.0


SAME = Expect()
REFUSED = Expect(refuse=True)


def fields(ds: xr.Dataset) -> list[str]:
    """The fields of an ensemble (variables on a latitude-longitude grid)."""
    grid = {"lat", "latitude"}
    return [str(name) for name, var in ds.data_vars.items() if grid & {str(d) for d in var.dims}]


def _eps(ds: xr.Dataset) -> float:
    """The relative rounding of the fields' dtype (float32 sums round at its epsilon)."""
    kinds = [ds[name].dtype for name in fields(ds) if ds[name].dtype.kind == "f"]
    return max((float(np.finfo(kind).eps) for kind in kinds), default=EPS)


def _magnitude(ds: xr.Dataset) -> float:
    return max((float(abs(ds[name]).max()) for name in fields(ds) if ds[name].size), default=0.0)


# -- weather ensembles -------------------------------------------------------------------------


def aliases(ds: xr.Dataset, names: Mapping[str, str | None]) -> tuple[xr.Dataset, Expect]:
    """Dims (and their coordinates) renamed to other tools' names (``{"lat": "latitude"}``;
    ``None``: kept)."""
    renames = {dim: alias for dim, alias in names.items() if alias and dim in ds.dims}
    return ds.rename(renames), SAME


def reordered(ds: xr.Dataset, order: Sequence[str]) -> tuple[xr.Dataset, Expect]:
    """Every variable's dims in ``order`` (those it has); the sums' order changes."""
    noise = 64 * _eps(ds) * _magnitude(ds)
    return ds.transpose(*[dim for dim in order if dim in ds.dims]), Expect(bound=noise)


def reversed_coords(ds: xr.Dataset, dims: Sequence[str]) -> tuple[xr.Dataset, Expect]:
    """Coordinates ``dims`` in decreasing order (latitudes north to south and back)."""
    noise = 64 * _eps(ds) * _magnitude(ds)
    flipped = ds.isel({dim: slice(None, None, -1) for dim in dims if dim in ds.dims})
    return flipped, Expect(bound=noise)


def shifted_longitudes(ds: xr.Dataset) -> tuple[xr.Dataset, Expect]:
    """Longitudes in -180..180 (sorted) instead of 0..360: the same points, another grid."""
    lon = ds["lon"].values
    shifted = ds.assign_coords(lon=np.where(lon >= 180.0, lon - 360.0, lon)).sortby("lon")
    return shifted, Expect(bound=64 * _eps(ds) * _magnitude(ds), grid=True)


def shifted_times(ds: xr.Dataset, days: int) -> tuple[xr.Dataset, Expect]:
    """Start dates moved by ``days`` (another season of the same forecasts)."""
    moved = ds.assign_coords(time=ds["time"].values + np.timedelta64(days, "D"))
    return moved, SAME


def in_units(ds: xr.Dataset, units: str) -> tuple[xr.Dataset, Expect]:
    """The fields converted from kelvin to ``units`` (``cf_units``), the attribute set."""
    import cf_units

    kelvin = cf_units.Unit("K")
    target = cf_units.Unit(units)
    converted = ds.assign(
        {
            name: ds[name]
            .copy(data=kelvin.convert(ds[name].values, target))
            .assign_attrs(units=units)
            for name in fields(ds)
            if ds[name].attrs.get("units") == "K"
        }
    )
    # a rounding on the way there, one on the way back (both relative to the values)
    bound = 4 * _eps(ds) * _magnitude(ds) * max(UNITS[units], 1.0)
    return converted, Expect(bound=bound, scale=UNITS[units])


def in_calendar(ds: xr.Dataset, calendar: str) -> tuple[xr.Dataset, Expect]:
    """``time`` as cftime dates of ``calendar`` (the same days)."""
    import cftime

    dates = [
        cftime.datetime(*value.timetuple()[:6], calendar=calendar)
        for value in ds["time"].values.astype("datetime64[s]").astype(object)
    ]
    return ds.assign_coords(time=np.array(dates, dtype=object)), SAME


def packed(ds: xr.Dataset) -> tuple[xr.Dataset, Expect]:
    """The fields packed to int16 with ``scale_factor``/``add_offset`` (as ERA5 from MARS).

    Each value moves by at most half the quantisation step.
    """
    bound = 0.0
    encoded = ds.copy()
    for name in fields(ds):
        values = ds[name].values
        low, high = float(values.min()), float(values.max())
        step = (high - low) / (2**16 - 2)
        encoded[name].encoding.update(
            dtype="int16",
            scale_factor=step,
            add_offset=(high + low) / 2,
            _FillValue=np.int16(-(2**15)),
        )
        # half a step of quantisation, and float64 noise in unpacking
        bound = max(bound, step / 2 + 8 * _eps(ds) * _magnitude(ds))
    return encoded, Expect(bound=2 * bound, lossy=True)


def extra_variables(ds: xr.Dataset) -> tuple[xr.Dataset, Expect]:
    """A grid-mapping ``crs``, ``time_bnds`` and a station list beside the fields."""
    times = ds["time"].values
    bounds = np.stack([times, times + np.timedelta64(1, "D")], axis=1)
    extra = ds.assign(
        crs=((), np.int32(0), {"grid_mapping_name": "latitude_longitude"}),
        time_bnds=(("time", "bnds"), bounds),
        station_name=(("station",), np.array(["a", "b"])),
    )
    for name in fields(ds):
        extra[name].attrs["grid_mapping"] = "crs"
    return extra, SAME


def masked(ds: xr.Dataset, name: str, index: Sequence[int]) -> tuple[xr.Dataset, Expect]:
    """One value of field ``name`` (at ``index``, modulo its shape) missing (NaN)."""
    values = ds[name].values.copy()
    values[tuple(i % n for i, n in zip(index, values.shape, strict=False))] = np.nan
    return ds.assign({name: ds[name].copy(data=values)}), REFUSED


def emptied(ds: xr.Dataset, dim: str) -> tuple[xr.Dataset, Expect]:
    """No values along ``dim`` (a download that selected nothing)."""
    return ds.isel({dim: slice(0, 0)}), REFUSED


def write(ds: xr.Dataset, stem: Path, fmt: str, chunks: Mapping[str, int] | None = None) -> Path:
    """``ds`` as ``stem.nc`` (netCDF4) or ``stem.zarr``, in ``chunks`` (by dim) when given."""
    if fmt == "zarr":
        path = stem.with_suffix(".zarr")
        if chunks:
            ds = ds.chunk({dim: size for dim, size in chunks.items() if dim in ds.dims})
        ds.to_zarr(path, mode="w-", zarr_format=2, consolidated=True)
        return path
    path = stem.with_suffix(".nc")
    encoding: dict[str, dict[str, Any]] = {}
    if chunks:
        for name, var in ds.data_vars.items():
            if var.ndim and var.dtype != object:
                size = tuple(max(1, min(chunks.get(str(d), n), n)) for d, n in var.sizes.items())
                encoding[str(name)] = {"chunksizes": size}
    # netCDF-4 holds a dim of length 0 only as an unlimited one
    empty = [dim for dim, size in ds.sizes.items() if size == 0]
    ds.to_netcdf(path, encoding=encoding, engine="netcdf4", unlimited_dims=empty)
    return path


# -- files of any kind -------------------------------------------------------------------------


def largest_file(path: Path, *, within: str = "") -> Path:
    """``path`` itself, or the largest file under a folder (a Zarr store's biggest chunk).

    ``within``: under that subfolder only (a store's array). Ties go to the first path in
    sorted order, so that a draw names the same file on every run.
    """
    if path.is_file():
        return path
    files = sorted(p for p in (path / within).rglob("*") if p.is_file())
    return max(files, key=lambda p: p.stat().st_size)


def truncated(path: Path, fraction: float, *, within: str = "") -> Expect:
    """The file (or a store's largest chunk, ``within`` an array) cut to ``fraction`` of its
    bytes, in place: a copy that stopped early."""
    target = largest_file(path, within=within)
    size = target.stat().st_size
    with open(target, "r+b") as handle:
        handle.truncate(int(size * fraction))
    return REFUSED


def edited_in_place(path: Path, offset: float) -> Expect:
    """A byte of the file (or a store's largest chunk) changed in place, keeping its size."""
    target = largest_file(path)
    data = bytearray(target.read_bytes())
    at = int(offset * (len(data) - 1))
    data[at] ^= 0xFF
    stat = target.stat()
    target.write_bytes(bytes(data))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    return REFUSED


# -- JSON tables -------------------------------------------------------------------------------


def read_table(path: Path) -> list[dict[str, Any]]:
    """A command's ``--json`` table."""
    return list(json.loads(path.read_text()))


def with_bound(expect: Expect, bound: float) -> Expect:
    """``expect`` with its bound widened to at least ``bound``."""
    return replace(expect, bound=max(expect.bound, bound))


# -- volume stores -----------------------------------------------------------------------------


def chunk_files(store: Path, array: str = "volume") -> list[Path]:
    """The chunk files of ``array`` in a Zarr store, in order."""
    meta = {".zarray", ".zattrs", "zarr.json", ".zgroup", ".zmetadata"}
    return sorted(p for p in (store / array).rglob("*") if p.is_file() and p.name not in meta)


def rewritten_store(
    ds: xr.Dataset,
    path: Path,
    *,
    zarr_format: int = 2,
    chunks: Sequence[int] | None = None,
    dtype: str | None = None,
) -> tuple[Path, Expect]:
    """``ds`` written again by plain xarray (another tool: no manifest), in ``chunks``, in
    Zarr ``zarr_format``, the volume as ``dtype``: the same values."""
    ds = ds.drop_encoding()
    if dtype is not None:
        ds = ds.assign(volume=ds["volume"].astype(dtype))
    encoding = {"volume": {"chunks": tuple(chunks)}} if chunks else None
    ds.to_zarr(path, encoding=encoding, zarr_format=zarr_format, write_empty_chunks=True)
    return path, SAME


def store_with_extra_variable(ds: xr.Dataset, path: Path) -> tuple[Path, Expect]:
    """The store with another variable beside the volumes (a user's notes per sample)."""
    extra = ds.drop_encoding().assign(weight=("sample", np.ones(ds.sizes["sample"])))
    extra.to_zarr(path, zarr_format=2)
    return path, SAME


def channels_last_store(ds: xr.Dataset, path: Path) -> tuple[Path, Expect]:
    """The volume stored ``(sample, z, y, x, channel)``, as channels-last tools write it:
    aligned by dim name, or refused naming the store."""
    ds.drop_encoding().transpose("sample", "z", "y", "x", "channel", ...).to_zarr(
        path, zarr_format=2
    )
    return path, Expect(grid=True)


def emptied_store(ds: xr.Dataset, path: Path) -> tuple[Path, Expect]:
    """A store of no samples."""
    ds.drop_encoding().isel(sample=slice(0, 0)).to_zarr(path, zarr_format=2)
    return path, REFUSED


def rewritten_in_place(store: Path, sample: int, value: float) -> Expect:
    """A sample's volume overwritten with zarr (chunk sizes kept): the store changed after
    sciml wrote it."""
    import zarr

    array = zarr.open_array(store / "volume", mode="r+")
    array[sample % array.shape[0]] = value
    return REFUSED
