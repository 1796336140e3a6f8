"""Collectives as autograd functions, for the two loss conventions of the package.

A tensor that stays split in space contributes to a global loss that is the
*sum* of the local losses, so the adjoint of a sum over ranks is again a sum
(:func:`all_reduce_sum`, used for normalisation statistics). A tensor that is
*replicated* on every spatial rank (after global pooling) feeds a loss that
each rank already holds whole, so its reduction passes gradients straight
through (:func:`replicated_sum`, :func:`gather_replicated`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from sciml.spatial_parallel.mesh import SpatialMesh


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReplicatedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def all_reduce_sum(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Sum over ``group``; the backward sums the gradients too (split-loss convention)."""
    if dist.get_world_size(group) == 1:
        return x
    return _AllReduceSum.apply(x, group)


def replicated_sum(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Sum over ``group`` into a replicated tensor; gradients pass straight through."""
    if dist.get_world_size(group) == 1:
        return x
    return _ReplicatedSum.apply(x, group)


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        shape: tuple[int, ...],
        index: tuple[slice, ...],
        group: dist.ProcessGroup,
    ) -> torch.Tensor:
        ctx.index = index
        out = x.new_zeros(shape)
        out[index] = x
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return grad[ctx.index].contiguous(), None, None, None


def gather_replicated(
    x: torch.Tensor, mesh: SpatialMesh, *, spatial: bool = True, batch: bool = True
) -> torch.Tensor:
    """The whole tensor of which ``x`` is this rank's block, on every rank.

    ``spatial`` gathers the last three axes over the spatial group, ``batch`` the
    first axis over the data group. The backward returns this rank's block of
    the gradient (the result is replicated: each rank's loss is the global one).
    """
    shape = list(x.shape)
    index: list[slice] = [slice(None)] * x.dim()
    if spatial:
        if x.dim() < 3:
            raise ValueError(f"cannot gather a {x.dim()}-D tensor over the spatial axes")
        shape[-3:] = mesh.global_spatial_shape(x.shape)
        index[-3:] = mesh.block([1, 1, *shape[-3:]])[2:]
    if batch:
        shape[0] = mesh.global_batch(x.shape[0])
        index[0] = mesh.block([shape[0], 1, 1, 1, 1])[0]
    parts = (mesh.spatial_size if spatial else 1) * (mesh.data if batch else 1)
    if parts == 1:
        return x
    if spatial and batch:
        group = dist.group.WORLD
    else:
        group = mesh.spatial_group if spatial else mesh.data_group
    return _Gather.apply(x, tuple(shape), tuple(index), group)
