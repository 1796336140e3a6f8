"""Sharded reads: each rank loads only its block of a global (N, C, D, H, W) array."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sciml.spatial_parallel.mesh import SpatialMesh


def read_block(array: Any, mesh: SpatialMesh, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """This rank's block of a lazily indexed ``(N, C, D, H, W)`` array, as a tensor.

    ``array`` is anything sliced with positional slices without loading the
    rest: a Dask-backed :class:`xarray.DataArray`, a Zarr or h5py array, a
    NumPy memmap. The result equals ``shard(torch.as_tensor(array[...]), mesh)``.

    Raises:
        ValueError: If the array is not 5-D.
        TypeError: If ``mesh`` is not a SpatialMesh or ``array`` has no shape.
    """
    if not hasattr(array, "shape"):
        raise TypeError(f"read_block expects an array with a shape, got {type(array).__name__}")
    shape = tuple(int(s) for s in array.shape)
    if len(shape) != 5:
        dims = getattr(array, "dims", None)
        raise ValueError(
            f"read_block expects a global (N, C, D, H, W) array, got shape {shape}"
            + (f" with dims {dims}" if dims else "")
        )
    if not isinstance(mesh, SpatialMesh):
        raise TypeError(f"read_block expects a SpatialMesh, got {type(mesh).__name__}")
    block = array[mesh.block(shape)]
    values = np.ascontiguousarray(getattr(block, "values", block))
    tensor = torch.from_numpy(values)
    return tensor if dtype is None else tensor.to(dtype)
