"""Losses over split outputs: local terms whose sum over the spatial group is the global loss.

Following the package's convention, each rank back-propagates its own term;
the parameter gradients summed over the spatial group (done by the parallel
model) are then those of the global loss.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from sciml.distributed.collectives import all_reduce_cpu
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.replicated import is_replicated
from sciml.spatial_parallel.shapes import marked_global


def _global_count(x: torch.Tensor, mesh: SpatialMesh, *, like: torch.Tensor | None = None) -> int:
    """Values of the split tensor ``x`` over the spatial group (this replica's batch).

    Without communication when ``x`` (or ``like``, a block of the same shape) is
    marked with its global shape (model outputs and :func:`shard` results are);
    else one collective over the spatial group.
    """
    if is_replicated(x) or mesh.spatial_size == 1:
        return x.numel()
    for tensor in (x, like):
        marked = None if tensor is None else marked_global(tensor)
        if (
            marked is not None
            and len(marked) == 5
            and tensor is not None
            and tensor.shape == x.shape
        ):
            return x.shape[0] * x.shape[1] * math.prod(marked[2:])
    count = all_reduce_cpu(torch.tensor([x.numel()], dtype=torch.int64), group=mesh.spatial_group)
    return int(count)


def spatial_mean(x: torch.Tensor, mesh: SpatialMesh) -> torch.Tensor:
    """This rank's term of the mean of a split tensor over the whole sample volume.

    ``sum(spatial_mean(block))`` over the spatial group equals ``x_global.mean()``
    for this replica's batch. A replicated tensor's mean is returned whole. The
    global count comes from ``x``'s global-shape mark when it has one, else from
    one collective over the spatial group.
    """
    return x.sum() / _global_count(x, mesh)


def mse_loss(input: torch.Tensor, target: torch.Tensor, mesh: SpatialMesh) -> torch.Tensor:
    """This rank's term of the mean squared error over the whole volume.

    Raises:
        ValueError: If ``input`` and ``target`` differ in shape (nothing is broadcast).
    """
    if input.shape != target.shape:
        raise ValueError(
            f"mse_loss: input block {tuple(input.shape)} and target block "
            f"{tuple(target.shape)} differ; shard both with the same mesh"
        )
    squares = (input - target).square()
    count = _global_count(input, mesh, like=target)
    return squares.sum() / count


def global_loss(local: torch.Tensor, mesh: SpatialMesh, *, replicated: bool = False) -> float:
    """The global loss value for logging.

    It is the sum of the spatial terms (or the replicated value), averaged over the
    data-parallel replicas.
    """
    if local.numel() != 1:
        raise ValueError(f"global_loss expects a scalar loss term, got shape {tuple(local.shape)}")
    value = local.detach().reshape(1).to(torch.float64)
    if not replicated and mesh.spatial_size > 1:
        dist.all_reduce(value, group=mesh.spatial_group)
    if mesh.data > 1:
        dist.all_reduce(value, group=mesh.data_group)
        value /= mesh.data
    return float(value)
