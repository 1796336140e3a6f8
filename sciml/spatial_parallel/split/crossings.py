"""Where a replicated tensor meets split blocks, or a parameter whose gradient is summed.

A replicated tensor's gradient is the whole gradient on every spatial rank: where
it enters a split computation its gradient is summed over the group
(:func:`split_use`); a tensor whose gradient the parallel model sums over the
group (a parameter outside the dense layers) entering a replicated computation
has its gradient divided by the group size (:func:`replicated_use`). A value
replicated along some mesh axes becomes blocks of global size 1 there
(:func:`own_first`, :func:`share_first`), and an op on replicated tensors alone
stays replicated (:func:`replicated_op`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from sciml.spatial_parallel.halo.first_order import first_order_only
from sciml.spatial_parallel.replicated import is_replicated
from sciml.spatial_parallel.split.tensor import (
    Groups,
    ReplicatedTensor,
    Shape,
    Split,
    SplitContext,
    SplitTensor,
    map_tensors,
    tensors_in,
    unwrap,
    wrap_replicated,
)


class _ReplicatedUse(torch.autograd.Function):
    """Identity; the backward divides by the group size (a summed gradient used replicated)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, parts: int) -> torch.Tensor:
        ctx.parts = parts
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad / ctx.parts, None


class _SplitUse(torch.autograd.Function):
    """Identity; the backward sums the gradients over the group (a replicated tensor used split)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    @first_order_only("an all-reduce over the spatial ranks")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def split_use(x: torch.Tensor, ctx: SplitContext, groups: Groups | None = None) -> torch.Tensor:
    """A replicated ``x`` entering a split computation: gradients summed over the group.

    ``groups`` (default: the spatial group) are those ``x`` is replicated over.
    """
    plain = unwrap(x)
    if not plain.requires_grad or ctx.mesh.spatial_size == 1:
        return plain
    for group in groups or (ctx.mesh.spatial_group,):
        plain = _SplitUse.apply(plain, group)
    return plain


def block_of(
    x: torch.Tensor, ctx: SplitContext, split: Split, shape: Shape | None = None
) -> torch.Tensor:
    """This rank's block along the dims of ``split`` of a whole ``x`` (expanded to ``shape``).

    A replicated ``x`` (a gathered token sequence, a positional encoding) has its
    gradients summed over the group (:func:`split_use`); a plain one (a constant, a
    parameter whose gradient the model sums) keeps its own.
    """
    full = split_use(x, ctx) if is_replicated(x) else unwrap(x)
    if shape is not None:
        full = full.expand(shape)
    for dim, axis in split:
        lo, hi = ctx.bounds(full.shape[dim], axis)
        full = full.narrow(dim, lo, hi - lo)
    return full


class _OwnFirst(torch.autograd.Function):
    """Keep a value replicated over groups on their first rank; the backward shares its gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, shape: Shape, groups: Groups) -> torch.Tensor:
        ctx.shape, ctx.owner, ctx.groups = tuple(x.shape), tuple(x.shape) == shape, groups
        return x.clone() if ctx.owner else x.new_zeros(shape)

    @staticmethod
    @first_order_only("an all-reduce along the reduced mesh axes")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        full = grad.contiguous().clone() if ctx.owner else grad.new_zeros(ctx.shape)
        for group in ctx.groups:
            dist.all_reduce(full, group=group)
        return full, None, None


def own_first(x: torch.Tensor, ctx: SplitContext, dims: Sequence[int], axes: Sequence[int]) -> Any:
    """``x``, replicated along mesh ``axes``, as blocks of global size 1 along ``dims``.

    The rank first along every axis of ``axes`` holds the value, the others an
    empty block, as :func:`torch.tensor_split` splits a dim of size 1.
    """
    shape = list(x.shape)
    for dim, axis in zip(dims, axes, strict=True):
        shape[dim] = 1 if ctx.mesh.spatial_coords[axis] == 0 else 0
    return _OwnFirst.apply(x, tuple(shape), ctx.groups(axes))


class _ShareFirst(torch.autograd.Function):
    """The first rank's size-1 block on every rank of a group; the backward sums it back there."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, owner: bool, group: Any) -> Any:
        ctx.dim, ctx.owner, ctx.group = dim, owner, group
        shape = list(x.shape)
        shape[dim] = 1
        out = x.clone() if owner else x.new_zeros(shape)
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    @first_order_only("an all-reduce along a split mesh axis")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return (grad if ctx.owner else grad.narrow(ctx.dim, 0, 0)), None, None, None


def share_first(x: torch.Tensor, ctx: SplitContext, dim: int, axis: int) -> torch.Tensor:
    """A block of global size 1 along ``dim`` (split along mesh ``axis``), on every rank there.

    The result broadcasts along ``dim`` against a block of any global size.
    """
    owner = ctx.mesh.spatial_coords[axis] == 0
    return _ShareFirst.apply(x, dim, owner, ctx.mesh.dim_groups[axis])


def replicated_use(x: torch.Tensor, ctx: SplitContext) -> torch.Tensor:
    """A tensor whose gradient the model sums over the group, entering a replicated computation."""
    if not x.requires_grad or id(x) in ctx.averaged or ctx.mesh.spatial_size == 1:
        return x
    return _ReplicatedUse.apply(x, ctx.mesh.spatial_size)


def replicated_op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An op on replicated tensors (no split block): run it, keep the results replicated."""
    every = tensors_in(args) + tensors_in(tuple(kwargs.values()))
    ctx = next(t._ctx for t in every if isinstance(t, ReplicatedTensor))
    if getattr(func, "__name__", "") == "__get__":
        return func(*args, **kwargs)

    def plain(t: torch.Tensor) -> torch.Tensor:
        return unwrap(t) if is_replicated(t) else replicated_use(t, ctx)

    args = map_tensors(args, plain)
    kwargs = dict(zip(kwargs, map_tensors(tuple(kwargs.values()), plain), strict=True))
    out = func(*args, **kwargs)
    return _rewrap_replicated(out, ctx)


def _rewrap_replicated(out: Any, ctx: SplitContext) -> Any:
    if isinstance(out, torch.Tensor) and not isinstance(out, SplitTensor):
        return wrap_replicated(out, ctx)
    if isinstance(out, tuple | list):
        return type(out)(_rewrap_replicated(o, ctx) for o in out)
    return out
