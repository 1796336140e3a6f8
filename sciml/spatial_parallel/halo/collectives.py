"""Collectives as autograd functions, for the two loss conventions of the package.

A tensor that stays split in space contributes to a global loss that is the
*sum* of the local losses, so the adjoint of a sum over ranks is again a sum
(:func:`all_reduce_sum`, used for normalisation statistics). A tensor that is
*replicated* on every spatial rank (after global pooling) feeds a loss that
each rank already holds whole, so its reduction passes gradients straight
through (:func:`replicated_sum`, :func:`gather_replicated`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from sciml.distributed.collectives import collective_device
from sciml.spatial_parallel.halo.first_order import first_order_only
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.partition import block_bounds


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    @first_order_only("an all-reduce over the spatial ranks")
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
    @first_order_only("a sum into a replicated tensor")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


@torch.compiler.disable  # collectives: run eagerly under torch.compile
def all_reduce_sum(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Sum over ``group``; the backward sums the gradients too (split-loss convention)."""
    if dist.get_world_size(group) == 1:
        return x
    return _AllReduceSum.apply(x, group)


@torch.compiler.disable  # collectives: run eagerly under torch.compile
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
    @first_order_only("a gather into a replicated tensor")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return grad[ctx.index].contiguous(), None, None, None


def _check_blocks(x: torch.Tensor, mesh: SpatialMesh, *, spatial: bool, batch: bool) -> None:
    """Raise on every rank unless each rank's ``x`` is its block of one global tensor.

    One all-gather of the shapes over all ranks, before any collective that
    depends on them, so that a bad block is an error everywhere, never a hang.
    """
    if x.dim() > 8:
        raise ValueError(f"cannot gather a {x.dim()}-D tensor (at most 8 dimensions)")
    mine = torch.zeros(11, dtype=torch.int64)
    mine[:3] = torch.tensor([spatial, batch, x.dim()])
    mine[3 : 3 + x.dim()] = torch.tensor(x.shape)
    mine = mine.to(collective_device())
    shapes = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(shapes, mine)
    rows = [row.tolist() for row in shapes]
    if any(row[:3] != rows[0][:3] for row in rows):
        found = {r: tuple(row[3 : 3 + row[2]]) for r, row in enumerate(rows)}
        raise ValueError(
            f"unshard: the ranks passed tensors of different kinds (split block vs replicated, "
            f"or different numbers of dimensions): shapes by rank {found}"
        )
    local = [tuple(row[3 : 3 + rows[0][2]]) for row in rows]
    coords = [
        tuple(int(c) for c in torch.unravel_index(torch.tensor(r), mesh.shape))
        for r in range(len(rows))
    ]
    full = list(local[0])
    if batch:
        full[0] = sum(s[0] for s, c in zip(local, coords, strict=True) if c[1:] == (0, 0, 0))
    if spatial:
        for k in range(3):
            full[x.dim() - 3 + k] = sum(
                s[x.dim() - 3 + k]
                for s, c in zip(local, coords, strict=True)
                if c[0] == 0 and all(c[1 + j] == 0 for j in range(3) if j != k)
            )
    bad = {}
    for rank, (size, c) in enumerate(zip(local, coords, strict=True)):
        expected = list(full)
        if batch:
            lo, hi = block_bounds(full[0], mesh.data)[c[0]]
            expected[0] = hi - lo
        else:  # replicas may hold batches of different sizes
            expected[0] = local[mesh.rank_of(c[0], 0, 0, 0)][0]
        if spatial:
            for k in range(3):
                axis = x.dim() - 3 + k
                lo, hi = block_bounds(full[axis], mesh.grid[k])[c[1 + k]]
                expected[axis] = hi - lo
        if list(size) != expected:
            bad[rank] = f"{size} instead of {tuple(expected)}"
    if bad:
        raise ValueError(
            f"unshard: these ranks do not hold their block of a global tensor of shape "
            f"{tuple(full)} on {mesh}: {bad}; shard inputs with sciml.spatial_parallel.shard"
        )


@torch.compiler.disable  # collectives: run eagerly under torch.compile
def gather_replicated(
    x: torch.Tensor,
    mesh: SpatialMesh,
    *,
    spatial: bool = True,
    batch: bool = True,
    shape: Sequence[int] | None = None,
) -> torch.Tensor:
    """The whole tensor of which ``x`` is this rank's block, on every rank.

    ``spatial`` gathers the last three axes over the spatial group, ``batch`` the
    first axis over the data group. The backward returns this rank's block of
    the gradient (the result is replicated: each rank's loss is the global one).
    ``shape``, the gathered shape when the caller knows it (a layer from its
    model's shape trace), skips the collectives that check the blocks and find
    the global shape.
    """
    if spatial and x.dim() < 3:
        raise ValueError(f"cannot gather a {x.dim()}-D tensor over the spatial axes")
    if shape is None and dist.get_world_size() > 1:
        _check_blocks(x, mesh, spatial=spatial, batch=batch)
    known = shape is not None
    shape = list(x.shape) if shape is None else list(shape)
    index: list[slice] = [slice(None)] * x.dim()
    if spatial:
        if not known:
            shape[-3:] = mesh.global_spatial_shape(x.shape)
        index[-3:] = mesh.block([1, 1, *shape[-3:]])[2:]
    if batch:
        if not known:
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
