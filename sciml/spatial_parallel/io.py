"""Sharded reads: each rank loads only its block of a global (N, C, D, H, W) array.

For training from files, :class:`sciml.volumes.dataset.ShardedVolumes` reads each
sample's block (its replica's samples chosen by ``fit``); :func:`read_block`
is the one-call read of an array's block.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

import numpy as np
import torch

from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.shapes import mark_global

__all__ = ["read_block"]


def read_block(
    array: Any,
    mesh: SpatialMesh,
    *,
    dtype: torch.dtype | None = None,
    batch: Literal["global", "replica"] = "global",
) -> torch.Tensor:
    """This rank's block of a lazily indexed ``(N, C, D, H, W)`` array, as a tensor.

    ``array`` is anything sliced with positional slices without loading the
    rest: a Dask-backed :class:`xarray.DataArray`, a Zarr array, a NumPy
    memmap. Dask-backed arrays are computed on Dask's synchronous scheduler,
    so the read is safe inside ``DataLoader`` workers forked from a process
    that used Dask's thread pool (whose threads a fork does not copy).

    Args:
        array: The array.
        mesh: The process grid.
        dtype: Tensor dtype (default: the array's).
        batch: ``"global"``: ``array`` holds the global batch, which is split
            over the ``data`` replicas as :func:`~sciml.spatial_parallel.shard`
            splits it (the result equals ``shard(torch.as_tensor(array[...]), mesh)``);
            ``"replica"``: ``array`` holds this replica's own samples (chosen
            by a sampler), which are all kept; only the volume is split.

    Raises:
        ValueError: If the array is not 5-D or ``batch`` is unknown.
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
    if batch not in ("global", "replica"):
        raise ValueError(f"read_block: batch must be 'global' or 'replica', got {batch!r}")
    index = mesh.block(shape)
    if batch == "replica":
        index = (slice(None), *index[1:])
    block = array[index]
    values = getattr(block, "data", block) if hasattr(block, "dims") else block
    dask = sys.modules.get("dask")  # a Dask collection exists only once Dask is imported
    if dask is not None and dask.is_dask_collection(values):
        (values,) = dask.compute(values, scheduler="synchronous")
    tensor = torch.from_numpy(np.ascontiguousarray(values))
    tensor = tensor if dtype is None else tensor.to(dtype)
    if batch == "global" or mesh.data == 1:  # a replica's own batch has no global size
        mark_global(tensor, shape if batch == "global" else (tensor.shape[0], *shape[1:]))
    return tensor
