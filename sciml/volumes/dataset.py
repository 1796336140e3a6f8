"""Sharded volume datasets: each rank reads only its block of every sample.

A volume file holds a variable ``(sample, channel, z, y, x)`` (chunked so
that a rank's block is a few whole chunks) and a target: a vector per sample
``(sample, k)`` (CosmoFlow's parameters) or a label volume
``(sample, z, y, x)`` (a segmentation). Dimensions are found by name, in any
order, under the names of :data:`~sciml.volumes.layout.DIM_NAMES` (channels
last as other CosmoFlow data sets, ``x, y, z``, ``n``/``batch``,
``c``/``channels``, ...), and read as ``(sample, channel, z, y, x)``; each
rank still reads only its block. For a spatial mesh,
:class:`ShardedVolumes` gives sample ``i`` as *this rank's block* of the
volume (widened by ``halo`` voxels where asked, clipped at the edges) and
the target (the whole vector, or the label block)::

    mesh = SpatialMesh(data=2, depth=2)
    train = ShardedVolumes("cosmo/train.zarr", mesh=mesh, target="params")
    x, y = train[0]            # (C, D/2, H, W) block of volume 0, its 4 parameters
    fit(parallelize(model, mesh), optimizer, train, loss_fn, ...)

The sample order, and which replica reads which sample, is
:func:`sciml.training.fit`'s (the replica is the mesh's data coordinate), so
replicas read different samples and the ranks of one replica the same one.
Prefetch, as HDMLP/NoPFS do: the order of every epoch follows from the seed
(:func:`sciml.datasets.sampling.epoch_batches`), and ``fit``'s loader workers
(``TrainConfig.num_workers``, persistent across epochs) read the blocks of
the next batches in that order, at most two batches per worker ahead.

Reading: a Zarr store's chunk inventory is checked when it is opened, and
each chunk's checksum as it is read (:mod:`sciml.datasets.store`): a missing or
damaged chunk is an error naming the store, the array and the chunk, never
zeros. The file is opened lazily in each process (and reopened after a
``fork``), without Dask, so a ``DataLoader`` worker never inherits a thread
pool or a file handle from its parent. Zarr stores are read through a store
that counts the bytes it fetches (:attr:`ShardedVolumes.bytes_read`, summed
over the process and its loader workers); netCDF-4 files count the bytes of
the blocks they return. A volume whose attribute ``transform`` is ``"log1p"``
(int16 counts) is read as ``log1p(counts)``. :mod:`sciml.volumes.stats` computes
per-channel normalisation statistics from the blocks collectively.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import xarray as xr
from torch.utils.data import Dataset, get_worker_info

from sciml.datasets.channels import NormStats
from sciml.datasets.store import StoreError, StoreInventory, check_store
from sciml.datasets.xarray_dataset import open_dataset
from sciml.volumes.layout import VOLUME_DIMS, block_slices, dims_by_name

if TYPE_CHECKING:
    from sciml.spatial_parallel.mesh import SpatialMesh

__all__ = ["ShardedVolumes"]

#: Transforms applied on read, named by a volume's ``transform`` attribute.
TRANSFORMS = ("log1p",)
_NUMPY_DTYPES = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16}


def _as_tensor(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """``values`` as a ``dtype`` tensor, cast by NumPy on this thread where it can.

    torch's cast of a small block starts its intra-op threads, which on a loaded node
    cost more than the cast itself; the rounding is the same (to nearest, ties to even).
    """
    numpy_dtype = _NUMPY_DTYPES.get(dtype)
    if numpy_dtype is None:  # bfloat16 has no NumPy dtype
        return torch.from_numpy(np.ascontiguousarray(values)).to(dtype)
    return torch.from_numpy(np.ascontiguousarray(values, dtype=numpy_dtype))


#: Slots of the bytes-read counter: the process itself and up to 63 loader workers.
COUNTER_SLOTS = 64


def _zarr_counted(path: Path, count: Callable[[int], None], inventory: StoreInventory) -> Any:
    """A Zarr store at ``path`` that counts the bytes of every read and checks whole chunks."""
    from zarr.storage import LocalStore, WrapperStore

    class CheckedStore(WrapperStore[LocalStore]):
        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            buffer = await super().get(key, prototype, byte_range)
            if buffer is not None:
                count(len(buffer))
                if byte_range is None:
                    inventory.verify(key, buffer.as_numpy_array())
            return buffer

    return CheckedStore(LocalStore(path, read_only=True))


class ShardedVolumes(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Sample ``i``: this rank's block of volume ``i`` and its target.

    Args:
        path: A Zarr store or a netCDF-4 file (see the module docstring).
        mesh: The spatial mesh (``None``: the whole volume, one process).
        variable: The volume variable ``(sample, channel, z, y, x)``, its dims found
            by name in any order (:data:`~sciml.volumes.layout.DIM_NAMES`).
        target: A variable ``(sample, k)`` (given whole) or ``(sample, z, y, x)``
            (given as this rank's block, without halo; dims named as the volume's).
        halo: Voxels added on every side of the block (clipped at the edges).
        stats: Per-channel normalisation applied after the transform.
        dtype: Floating-point dtype of the volume block (and of a vector target).

    Raises:
        FileNotFoundError, ValueError: For a missing file, a missing or
            misshapen variable, no samples, dims not known by name, a target with another
            sample count or other spatial dims, a negative halo, stats for other
            channels, a block of a grid with more parts than voxels, or an
            unknown transform.
        sciml.datasets.store.StoreError: A ``ValueError`` naming the store, the array and
            the chunk, for a chunk that is missing or has another size (when the
            store is opened), or that does not decode or match its checksum (when
            it is read).
    """

    def __init__(
        self,
        path: Path | str,
        *,
        mesh: SpatialMesh | None = None,
        variable: str = "volume",
        target: str = "params",
        halo: int = 0,
        stats: NormStats | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        """Check the file's layout against the options (arguments: see the class)."""
        self.path, self.variable, self.target = Path(path), variable, target
        if isinstance(halo, bool) or not isinstance(halo, int) or halo < 0:
            raise ValueError(f"halo must be an integer >= 0, got {halo!r}")
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point torch dtype, got {dtype}")
        self.halo, self.dtype, self.stats = halo, dtype, stats
        if mesh is not None and not all(hasattr(mesh, a) for a in ("grid", "spatial_coords")):
            raise TypeError(f"mesh must be a SpatialMesh or None, got {type(mesh).__name__}")
        self.grid = (1, 1, 1) if mesh is None else tuple(mesh.grid)
        self.coords = (0, 0, 0) if mesh is None else tuple(mesh.spatial_coords)
        # one slot per process (no lock needed), shared with loader workers however
        # they start (fork or spawn: a shared-memory tensor pickles by handle)
        self._counts = torch.zeros(COUNTER_SLOTS, dtype=torch.int64).share_memory_()
        self._opened: tuple[int, xr.Dataset] | None = None
        # every chunk there, with its size, before any value is read
        self.inventory = check_store(self.path) if self.path.is_dir() else None
        self._check_layout(self._dataset())

    def _check_layout(self, ds: xr.Dataset) -> None:
        where = f"in {self.path}"
        for name in (self.variable, self.target):
            if name not in ds:
                raise ValueError(
                    f"no variable {name!r} {where}; it has {sorted(map(str, ds.data_vars))}"
                )
        volume, target = ds[self.variable], ds[self.target]
        #: The store's name of each dim of the volume, in the order it is read.
        self.dims = dims_by_name(volume.dims, VOLUME_DIMS, what=f"{self.variable!r} {where}")
        self.sample_dim = self.dims["sample"]
        self.spatial_dims = tuple(self.dims[d] for d in ("z", "y", "x"))
        depth, height, width = (int(volume.sizes[d]) for d in self.spatial_dims)
        self.shape = (depth, height, width)
        #: The volume's dtype in the file (before the transform).
        self.file_dtype = str(volume.dtype)
        samples = int(volume.sizes[self.sample_dim])
        if samples == 0:
            raise ValueError(
                f"{self.path} has no samples: {self.variable!r} has 0 along its sample dim "
                f"{self.sample_dim!r}; write the store with at least one sample"
            )
        if self.sample_dim not in target.dims or target.sizes[self.sample_dim] != samples:
            raise ValueError(
                f"target {self.target!r} {where} has dims {dict(target.sizes)}; one of them "
                f"must be the {samples} samples of {self.sample_dim!r}"
            )
        self.split_target = target.ndim == 4
        if self.split_target:
            label = (self.sample_dim, *self.spatial_dims)
            if set(target.dims) != set(label):
                raise ValueError(
                    f"label target {self.target!r} {where} has dims {target.dims}, expected "
                    f"those of {self.variable!r} in any order: {label}"
                )
            self.target_dims = label
        elif target.ndim == 2:
            self.target_dims = (
                self.sample_dim,
                *(str(d) for d in target.dims if d != self.sample_dim),
            )
        else:
            raise ValueError(
                f"target {self.target!r} {where} must be (sample, k) or (sample, z, y, x), "
                f"got dims {target.dims}"
            )
        #: A target's shape without the sample dim (``(k,)`` or the whole label volume).
        self.target_shape = tuple(int(target.sizes[d]) for d in self.target_dims[1:])
        small = [
            d for d, n, p in zip(self.spatial_dims, self.shape, self.grid, strict=True) if n < p
        ]
        if small:
            sizes = dict(zip(self.spatial_dims, self.shape, strict=True))
            raise ValueError(
                f"{self.variable!r} {where} has {sizes} voxels, fewer than the blocks of the "
                f"mesh's (depth, height, width) grid {self.grid} along {small}"
            )
        self.transform = volume.attrs.get("transform")
        if self.transform is not None and self.transform not in TRANSFORMS:
            raise ValueError(
                f"{self.variable!r} {where} asks for transform {self.transform!r}; "
                f"known: {TRANSFORMS}"
            )
        self.length = samples
        self.set_stats(self.stats)

    def set_stats(self, stats: NormStats | None) -> None:
        """Normalise with ``stats`` from now on (``None``: raw values).

        Raises:
            ValueError: If ``stats`` are for other channels.
        """
        if stats is not None and stats.channels != self.channels():
            raise ValueError(
                f"normalisation statistics are for channels {stats.channels}, "
                f"{self.path} has {self.channels()}"
            )
        self.stats = stats

    def channels(self, ds: xr.Dataset | None = None) -> tuple[str, ...]:
        """Channel names: the channel coordinate's values, else ``<variable>[<i>]``."""
        volume = (ds if ds is not None else self._dataset())[self.variable]
        dim = self.dims["channel"]
        if dim in volume.coords:
            return tuple(str(v) for v in volume[dim].values)
        return tuple(f"{self.variable}[{i}]" for i in range(volume.sizes[dim]))

    @property
    def bytes_read(self) -> int:
        """Bytes read so far by this process and its loader workers."""
        return int(self._counts.sum())

    def _count(self, size: int) -> None:
        """Add ``size`` bytes to this process's slot of the counter."""
        worker = get_worker_info()
        slot = 0 if worker is None else 1 + worker.id
        if slot >= COUNTER_SLOTS:
            raise ValueError(
                f"ShardedVolumes counts the reads of at most {COUNTER_SLOTS - 1} loader workers, "
                f"worker {worker.id if worker else 0} is one too many"
            )
        self._counts[slot] += size

    def _dataset(self) -> xr.Dataset:
        """The file, opened once per process (no Dask: lazily indexed arrays)."""
        if self._opened is None or self._opened[0] != os.getpid():
            if self.inventory is not None:
                store = _zarr_counted(self.path, self._count, self.inventory)
                ds = xr.open_zarr(store, chunks=None)
            else:
                ds = open_dataset(self.path, chunks=None)
            self._opened = (os.getpid(), ds)
        return self._opened[1]

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the open file (a worker opens its own)."""
        return self.__dict__ | {"_opened": None}

    def __len__(self) -> int:
        """Number of samples."""
        return self.length

    def block(self, *, halo: int | None = None) -> tuple[slice, ...]:
        """This rank's ``(z, y, x)`` slices (with ``halo``, default the dataset's)."""
        halo = self.halo if halo is None else halo
        return block_slices(self.shape, self.grid, self.coords, halo=halo)

    def read_volume(self, index: int) -> np.ndarray:
        """This rank's block of volume ``index`` ``(C, d, h, w)``, transformed, as float64."""
        dims = tuple(self.dims[d] for d in VOLUME_DIMS)
        raw = self._read(
            self.variable, dict(zip(dims, (index, slice(None), *self.block()), strict=True))
        )
        values = raw.astype(np.float64)
        if self.transform == "log1p":
            values = np.log1p(values)
        return values

    def _read(self, name: str, key: dict[str, int | slice]) -> np.ndarray:
        """``name`` at ``key`` (by the store's dim names), its dims in ``key``'s order."""
        variable = self._dataset()[name].variable
        order = [d for d, k in key.items() if not isinstance(k, int)]
        try:
            values = np.asarray(variable.isel(key).transpose(*order).values)
        except StoreError:
            raise
        except Exception as err:  # noqa: BLE001 - a chunk that does not decode, named
            raise StoreError(
                f"{self._bad_chunk(name, key)} cannot be read: {type(err).__name__}: {err}"
            ) from err
        if self.inventory is None:
            self._count(values.nbytes)
        return values

    def _bad_chunk(self, name: str, key: dict[str, int | slice]) -> str:
        """The file, array and (Zarr) first chunk of ``name`` at ``key`` that fails to read."""
        variable = self._dataset()[name].variable
        chunks = variable.encoding.get("chunks")
        if self.inventory is None or chunks is None:
            return f"{self.path}: variable {name!r}"
        ranges = []
        for dim, size, edge in zip(variable.dims, variable.shape, chunks, strict=True):
            part = key.get(str(dim), slice(None))
            lo, hi, _ = (part, part + 1, 1) if isinstance(part, int) else part.indices(size)
            ranges.append(range(lo // edge, (hi - 1) // edge + 1))
        for index in itertools.product(*ranges):
            region = {
                d: slice(i * edge, (i + 1) * edge)
                for d, i, edge in zip(variable.dims, index, chunks, strict=True)
            }
            try:
                variable.isel(region).load()
            except Exception:  # noqa: BLE001 - the first chunk that fails is the one named
                return f"{self.path}: array {name!r}, chunk {index}"
        return f"{self.path}: variable {name!r}"

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's block of volume ``index`` and its target."""
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise TypeError(f"sample index must be an integer, got {index!r}")
        if not -self.length <= index < self.length:
            raise IndexError(f"sample {index} out of range for {self.length} samples")
        index = int(index) % self.length
        values = self.read_volume(index)
        if self.stats is not None:
            shape = (-1, 1, 1, 1)
            mean, std = np.reshape(self.stats.mean, shape), np.reshape(self.stats.std, shape)
            values = (values - mean) / std
        volume = _as_tensor(values, self.dtype)
        if self.split_target:
            key: dict[str, int | slice] = dict(
                zip(self.target_dims, (index, *self.block(halo=0)), strict=True)
            )
            return volume, torch.from_numpy(self._read(self.target, key).astype(np.int64))
        key = dict(zip(self.target_dims, (index, slice(None)), strict=True))
        vector = self._read(self.target, key)
        return volume, _as_tensor(vector.astype(np.float64), self.dtype)

    def block_sums(self, indices: Sequence[int]) -> np.ndarray:
        """Per channel: voxel count, sum and sum of squares of this rank's blocks (no halo)."""
        halo, self.halo = self.halo, 0
        try:
            totals = np.zeros((3, len(self.channels())))
            for index in indices:
                values = self.read_volume(int(index)).reshape(len(totals[0]), -1)
                totals += [np.full(len(values), values.shape[1]), values.sum(1), (values**2).sum(1)]
        finally:
            self.halo = halo
        return totals

    def voxels(self) -> int:
        """Voxels of one whole sample volume (all channels)."""
        return math.prod(self.shape) * len(self.channels())
