"""The layout that trains fast: one start date per chunk, and the training store.

A training sample is one start date and lead time of every member, level and grid point.
Read from a file chunked along ``time`` by the netCDF library's defaults (dozens of dates
per chunk), a random sample decompresses a whole chunk; with one start date per chunk it
decompresses its own date only. The package's writers (the toy presets,
``sciml weather split``) write one start date per chunk (:func:`date_chunks`), as
ECMWF's anemoi-datasets stores do for training ML weather models.

For other files (another chunking, a chunk far larger than the trainers' shuffle buffer,
GRIB, many files), ``sciml weather rechunk IN... OUT.zarr`` (:func:`write_training_store`)
converts them once to a Zarr store of one start date per chunk, with the project's
manifest of its files (:mod:`sciml.datasets.store`): :func:`sciml.weather.data.open_ensemble`
checks it when it opens the store (a missing, truncated or changed chunk is an error
naming the store, the array and the chunk, never zeros or a silent mix).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

import xarray as xr

from sciml.datasets.store import write_manifest
from sciml.io_utils import atomic_folder
from sciml.progress import phase

__all__ = ["date_chunks", "netcdf_encoding", "write_training_store"]

#: Says what the conversion does (``INFO``).
logger = logging.getLogger(__name__)


def date_chunks(var: xr.DataArray | xr.Variable) -> tuple[int, ...] | None:
    """The chunk shape of one start date: 1 along ``time``, whole along the other dims.

    ``None`` for a variable without ``time`` (static fields, coordinates: one chunk).
    """
    if "time" not in var.dims:
        return None
    return tuple(1 if dim == "time" else max(size, 1) for dim, size in var.sizes.items())


def netcdf_encoding(ds: xr.Dataset, *, dtype: str | None = None) -> dict[Hashable, Any]:
    """The netCDF encoding of the package's writers: compressed, one start date per chunk.

    Args:
        ds: The data to write.
        dtype: On-disk type of the data variables (``None``: their own).
    """
    encoding: dict[Hashable, Any] = {}
    for name, var in ds.data_vars.items():
        entry: dict[str, Any] = {"zlib": True, "complevel": 4}
        if dtype is not None:
            entry["dtype"] = dtype
        chunks = date_chunks(var)
        if chunks is not None and var.ndim:
            entry["chunksizes"] = chunks
        encoding[name] = entry
    return encoding


def write_training_store(
    paths: str | Path | Iterable[str | Path], out: str | Path, *, overwrite: bool = False
) -> Path:
    """Convert ensemble files to a Zarr training store: one start date per chunk, a manifest.

    The files are opened as :func:`sciml.weather.data.open_ensemble` opens them (netCDF,
    Zarr or GRIB, several combined, the project's names) and written a chunk of the
    source at a time (each source chunk is read once); the store gets its manifest and
    its final name only once every chunk is written.

    Args:
        paths: The ensemble file(s), glob patterns allowed.
        out: The store to write (a folder, e.g. ``train.zarr``).
        overwrite: Replace ``out`` when it exists.

    Returns:
        The store's path.

    Raises:
        FileExistsError: ``out`` exists and ``overwrite`` is false.
        ValueError: ``out`` is one of the inputs, or the data have no ``time`` dimension.
    """
    import shutil

    from sciml.weather.data import _expand, open_ensemble

    out = Path(out)
    inputs = _expand(paths)
    if any(out.resolve() == path.resolve() for path in inputs):
        raise ValueError(f"the training store {out} is one of the inputs; choose another OUT")
    ds = open_ensemble(inputs)
    if "time" not in ds.dims:
        raise ValueError(f"{', '.join(map(str, inputs))}: no start-date dimension 'time'")
    if out.exists():
        if not overwrite:
            raise FileExistsError(f"{out} exists; remove it or give --overwrite")
        shutil.rmtree(out)
    chunked = ds.chunk({dim: 1 if dim == "time" else -1 for dim in ds.dims})
    encoding: dict[Hashable, Any] = {}
    for name, var in chunked.variables.items():
        var.encoding = {}  # the source's chunks and filters are not the store's
        if name in chunked.data_vars:
            chunks = date_chunks(var)
            if chunks is not None:
                encoding[name] = {"chunks": chunks}
    dates = ds.sizes["time"]
    with (
        phase(logger, f"writing {out} ({ds.nbytes / 2**20:.4g} MiB, {dates} start dates)"),
        atomic_folder(out) as partial,
    ):
        chunked.to_zarr(
            partial,
            mode="w",
            encoding=encoding,
            consolidated=True,
            zarr_format=2,
            write_empty_chunks=True,
        )
        write_manifest(partial)
    return out
