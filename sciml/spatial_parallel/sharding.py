"""Move between global tensors and this rank's blocks."""

from __future__ import annotations

import torch

from sciml.spatial_parallel.halo.collectives import gather_replicated
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.replicated import is_split_volume
from sciml.spatial_parallel.shapes import mark_global


def _check_args(name: str, x: object, mesh: object) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} expects a torch.Tensor, got {type(x).__name__}")
    if not isinstance(mesh, SpatialMesh):
        raise TypeError(f"{name} expects a SpatialMesh, got {type(mesh).__name__}")


def shard(x: torch.Tensor, mesh: SpatialMesh) -> torch.Tensor:
    """This rank's block of a global ``(N, C, D, H, W)`` tensor (a contiguous copy).

    The batch is split over the ``data`` replicas and the volume over the
    spatial grid, like :func:`torch.tensor_split` (first blocks one larger).
    The block is marked with the global shape, so that a parallel model finds
    it without communication (:mod:`sciml.spatial_parallel.shapes`).

    Examples:
        In one process the mesh has one block, the whole tensor (with more ranks,
        each gets its own; see :func:`~sciml.spatial_parallel.parallelize`):

        >>> import torch
        >>> from sciml.distributed import init_distributed
        >>> from sciml.spatial_parallel import SpatialMesh
        >>> x = torch.randn(2, 1, 5, 4, 4)
        >>> with init_distributed():
        ...     mesh = SpatialMesh()
        ...     block = shard(x, mesh)
        ...     whole = unshard(block, mesh)
        >>> block.shape, torch.equal(whole, x)
        (torch.Size([2, 1, 5, 4, 4]), True)
    """
    _check_args("shard", x, mesh)
    if x.dim() != 5:
        raise ValueError(f"shard expects a global (N, C, D, H, W) tensor, got {tuple(x.shape)}")
    return mark_global(x[mesh.block(x.shape)].contiguous(), x.shape)


def unshard(x: torch.Tensor, mesh: SpatialMesh) -> torch.Tensor:
    """The whole tensor of which ``x`` is this rank's block, on every rank.

    A 5-D split block is gathered over the spatial grid and the batch; a
    replicated tensor (e.g. the output of a dense head) over the batch only.
    Differentiable: the backward keeps this rank's block of the gradient.
    """
    _check_args("unshard", x, mesh)
    return gather_replicated(x, mesh, spatial=is_split_volume(x), batch=True)
