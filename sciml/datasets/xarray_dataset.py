"""Torch datasets over Dask-backed xarray datasets.

Variables (and optionally a dimension such as ``level``) become channels,
one or more dimensions index the samples, and the rest are spatial::

    ds = open_dataset("data/era5_ensemble_sample.nc")
    data = XarrayDataset(ds, ["z", "t"], sample_dims=("time", "number"),
                         channel_dims=("isobaricInhPa",))
    data[0].shape       # (4, 61, 120): (z, t) x 2 levels, lat, lon
    loader = DataLoader(data, batch_size=8, num_workers=2)

A batch is read with one vectorised selection and one ``dask.compute`` (the
``__getitems__`` protocol of ``DataLoader``), not one small read per sample;
:class:`XarrayIterableDataset` streams whole chunks. Channels and their
normalisation statistics are defined in :mod:`sciml.datasets.channels` (re-exported
here); the statistics are computed lazily once, in a single pass, on whatever
Dask scheduler is active; sciml never starts a cluster of its own. Inside ``DataLoader`` worker
processes, reads run on Dask's synchronous scheduler: the workers are the
parallelism there, and a thread pool or client inherited through ``fork``
cannot be used.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import dask
import numpy as np
import torch
import xarray as xr
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from sciml.datasets.channels import (
    NormStats,
    channel_arrays,
    check_names,
    compute_stats,
    denormalise,
    normalise,
)
from sciml.datasets.sampling import epoch_seed
from sciml.datasets.store import is_zarr_store
from sciml.distributed import check_replica
from sciml.io_utils import small_chunk_cache

__all__ = [
    "NormStats",
    "XarrayDataset",
    "XarrayIterableDataset",
    "compute_stats",
    "denormalise",
    "normalise",
    "open_dataset",
]

_NETCDF_MAGIC = (b"CDF\x01", b"CDF\x02", b"CDF\x05", b"\x89HDF\r\n\x1a\n")


def _has_consolidated_metadata(store: Path) -> bool:
    """True if a Zarr v2 or v3 store carries consolidated metadata."""
    v3 = store / "zarr.json"
    return (store / ".zmetadata").exists() or (
        v3.exists() and '"consolidated_metadata"' in v3.read_text()
    )


def open_dataset(path: Path | str, *, chunks: Any = "auto", **kwargs: Any) -> xr.Dataset:
    """Open a netCDF file or a Zarr store lazily, as a Dask-backed dataset.

    Args:
        path: A netCDF file (classic or HDF5-based) or a Zarr store (folder).
        chunks: Dask chunks, as for ``xarray.open_dataset``.
        **kwargs: Passed to ``xarray.open_dataset`` / ``xarray.open_zarr``.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the file is neither netCDF nor Zarr, whatever its name says.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or Zarr store: {path}")
    if path.is_dir():
        if not is_zarr_store(path):
            raise ValueError(f"{path} is a folder but not a Zarr store (no .zgroup or zarr.json)")
        kwargs.setdefault("consolidated", _has_consolidated_metadata(path))
        return xr.open_zarr(path, chunks=chunks, **kwargs)
    with open(path, "rb") as handle:
        head = handle.read(8)
    if not head.startswith(_NETCDF_MAGIC):
        raise ValueError(
            f"{path} is not a netCDF file: it starts with {head!r}, expected the netCDF "
            "signature 'CDF' or the HDF5 signature"
        )
    with small_chunk_cache():
        return xr.open_dataset(path, chunks=chunks, **kwargs)


class _Layout:
    """Sample/channel/spatial layout shared by the map-style and iterable datasets."""

    def __init__(
        self,
        ds: xr.Dataset,
        variables: Sequence[str],
        sample_dims: str | Sequence[str],
        channel_dims: Sequence[str],
        stats: NormStats | None,
        allow_nan: bool,
        dtype: torch.dtype,
    ) -> None:
        self.sample_dims = (sample_dims,) if isinstance(sample_dims, str) else tuple(sample_dims)
        if not self.sample_dims or len(set(self.sample_dims)) != len(self.sample_dims):
            raise ValueError(f"sample_dims must name distinct dims, got {sample_dims!r}")
        check_names(ds, variables, self.sample_dims, channel_dims)
        if stats is not None and not isinstance(stats, NormStats):
            raise TypeError(f"stats must be NormStats or None, got {type(stats).__name__}")
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point torch dtype, got {dtype}")
        self.ds = ds[list(variables)]
        self.channels = channel_arrays(self.ds, variables, channel_dims)
        spatial = {
            name: tuple(d for d in array.dims if d not in self.sample_dims)
            for name, array in self.channels
        }
        self.spatial_dims = next(iter(spatial.values()))
        odd = {n: dims for n, dims in spatial.items() if dims != self.spatial_dims}
        if odd:
            raise ValueError(
                f"channels {sorted(odd)} have spatial dims {sorted(set(odd.values()))}, "
                f"expected {self.spatial_dims} like {self.channels[0][0]!r}"
            )
        self.shape = tuple(self.ds.sizes[d] for d in self.sample_dims)
        empty = {d: self.ds.sizes[d] for d in (*self.sample_dims, *self.spatial_dims)}
        if 0 in empty.values():
            raise ValueError(f"the dataset is empty along {[d for d, n in empty.items() if not n]}")
        names = tuple(n for n, _ in self.channels)
        if stats is not None and stats.channels != names:
            order = (
                " (the same channels in another order)" if set(stats.channels) == set(names) else ""
            )
            raise ValueError(
                f"normalisation statistics are for channels {stats.channels}, "
                f"the dataset has {names}{order}"
            )
        self.stats = stats
        self.allow_nan = allow_nan
        self.dtype = dtype

    def __len__(self) -> int:
        return math.prod(self.shape)

    def read(self, indices: Sequence[int]) -> list[torch.Tensor]:
        """Samples at flat ``indices``, read with one selection and one compute."""
        if any(isinstance(i, bool) or not isinstance(i, int | np.integer) for i in indices):
            raise TypeError(f"sample indices must be integers, got {list(indices)[:5]}")
        if any(not -len(self) <= i < len(self) for i in indices):
            raise IndexError(f"sample index out of range for {len(self)} samples: {indices}")
        flat = np.asarray(indices) % len(self)
        coords = np.unravel_index(flat, self.shape)
        selection = {
            dim: xr.DataArray(c, dims="_sample")
            for dim, c in zip(self.sample_dims, coords, strict=True)
        }
        arrays = [
            a.isel(selection).transpose("_sample", *self.spatial_dims).data
            for _, a in self.channels
        ]
        # Inside a DataLoader worker the process is the unit of parallelism, and a
        # thread pool or client inherited through fork is dead: compute in-process.
        scheduler = "synchronous" if get_worker_info() is not None else None
        computed = dask.compute(*arrays, scheduler=scheduler)
        values = np.stack([np.asarray(v) for v in computed], axis=1)
        if not self.allow_nan:
            self._check_nan(values, flat)
        if self.stats is not None:
            shape = (1, -1) + (1,) * len(self.spatial_dims)
            values = (values - np.reshape(self.stats.mean, shape)) / np.reshape(
                self.stats.std, shape
            )
        tensor = torch.from_numpy(np.ascontiguousarray(values)).to(self.dtype)
        return list(tensor.unbind(0))

    def _check_nan(self, values: np.ndarray, flat: np.ndarray) -> None:
        """Raise for the first sample and channel with a NaN or an infinity."""
        rows = values.reshape(values.shape[0], values.shape[1], -1)
        bad = ~np.isfinite(rows).all(axis=2)
        if bad.any():
            sample, channel = (int(i) for i in np.argwhere(bad)[0])
            kind = "NaN" if np.isnan(rows[sample, channel]).any() else "infinity"
            coords = np.unravel_index(flat[sample], self.shape)
            where = {d: int(i) for d, i in zip(self.sample_dims, coords, strict=True)}
            raise ValueError(
                f"{kind} in channel {self.channels[channel][0]!r} at sample {where}; pass "
                "allow_nan=True to keep non-finite values or fill them first"
            )


class _XarraySamples:
    """The options (see :class:`XarrayDataset`), layout, channels and stats both datasets share."""

    def __init__(
        self,
        ds: xr.Dataset,
        variables: Sequence[str],
        *,
        sample_dims: str | Sequence[str] = "time",
        channel_dims: Sequence[str] = (),
        stats: NormStats | str | None = None,
        allow_nan: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if isinstance(stats, str):
            if stats != "compute":
                raise ValueError(f"stats must be NormStats, 'compute' or None, got {stats!r}")
            stats = compute_stats(ds, variables, channel_dims=channel_dims)
        self.layout = _Layout(ds, variables, sample_dims, channel_dims, stats, allow_nan, dtype)

    @property
    def stats(self) -> NormStats | None:
        """The normalisation statistics in use."""
        return self.layout.stats

    @property
    def channels(self) -> tuple[str, ...]:
        """Channel names, e.g. ``("z[level=500]", "z[level=850]", "t")``."""
        return tuple(name for name, _ in self.layout.channels)


class XarrayDataset(_XarraySamples, Dataset[torch.Tensor]):
    """Map-style dataset: sample ``i`` is a ``(C, *spatial)`` float tensor.

    Args:
        ds: The (Dask-backed) dataset; nothing is loaded until a sample is read.
        variables: Data variables that become channels, in this order.
        sample_dims: Dimension(s) whose combinations are the samples (row-major).
        channel_dims: Dimensions folded into channels (e.g. ``("level",)``).
        stats: Normalisation statistics (:func:`compute_stats`), ``"compute"`` to
            compute them now, or ``None`` for raw values.
        allow_nan: If false, reading a sample with a NaN or an infinity raises
            ``ValueError``.
        dtype: Floating-point tensor dtype of the samples.

    Raises:
        KeyError: If a variable is not in ``ds``.
        ValueError: If a named dim is absent (or a channel dim belongs to no
            variable), the variables' spatial dims differ, the dataset is empty,
            or ``stats`` are for other channels (or the same ones in another order).
    """

    def __len__(self) -> int:
        """Number of samples."""
        return len(self.layout)

    def __getitem__(self, index: int) -> torch.Tensor:
        """Sample ``index`` as a ``(C, *spatial)`` tensor."""
        return self.layout.read([index])[0]

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        """A whole batch in one read (used by ``DataLoader``)."""
        return self.layout.read(indices)


class XarrayIterableDataset(_XarraySamples, IterableDataset[torch.Tensor]):
    """Stream samples chunk by chunk along the first sample dimension.

    Each Dask chunk of ``sample_dims[0]`` is read once; chunks are dealt out to
    ``DataLoader`` workers and to data-parallel ``replica`` ranks in turn, and
    shuffled (chunk order and samples within a chunk) from
    :func:`~sciml.datasets.sampling.epoch_seed` of ``seed`` and the epoch.
    Takes the options of :class:`XarrayDataset` (also ``stats="compute"``), plus:

    Args:
        shuffle: Shuffle chunk order and samples within each chunk.
        seed: Base seed of the shuffling; call :meth:`set_epoch` every epoch.
        replica: ``(index, count)`` of this data-parallel replica.
    """

    def __init__(
        self,
        ds: xr.Dataset,
        variables: Sequence[str],
        *,
        sample_dims: str | Sequence[str] = "time",
        channel_dims: Sequence[str] = (),
        stats: NormStats | str | None = None,
        allow_nan: bool = False,
        dtype: torch.dtype = torch.float32,
        shuffle: bool = False,
        seed: int = 0,
        replica: tuple[int, int] = (0, 1),
    ) -> None:
        """Check the options and find the first sample dim's chunks (arguments: see the class)."""
        super().__init__(
            ds,
            variables,
            sample_dims=sample_dims,
            channel_dims=channel_dims,
            stats=stats,
            allow_nan=allow_nan,
            dtype=dtype,
        )
        first = self.layout.sample_dims[0]
        chunks = self.layout.ds.chunksizes.get(first) or (self.layout.ds.sizes[first],)
        bounds = np.cumsum((0, *chunks))
        self.blocks = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.replica = check_replica(replica)

    def set_epoch(self, epoch: int) -> None:
        """Change the shuffling for the next pass."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[torch.Tensor]:
        """This worker's and replica's samples for the current epoch."""
        worker = get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker else (1, 0)
        index, count = self.replica
        rng = np.random.default_rng(epoch_seed(self.seed, self.epoch))
        order = rng.permutation(len(self.blocks)) if self.shuffle else range(len(self.blocks))
        inner = math.prod(self.layout.shape[1:])
        for position, block in enumerate(order):
            if position % (count * workers) != index * workers + worker_id:
                continue
            start, stop = self.blocks[block]
            flat = np.arange(start * inner, stop * inner)
            if self.shuffle:
                flat = rng.permutation(flat)
            yield from self.layout.read(flat.tolist())
