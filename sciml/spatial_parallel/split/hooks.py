"""Where blocks are wrapped and unwrapped: the parallel model's entry and exit, its split layers.

The model's own forward code sees :class:`~sciml.spatial_parallel.split.tensor.SplitTensor` blocks;
the split layers (which compute on blocks with halos and collectives of their
own) and whoever calls the model see plain tensors. A block is split in space
only: its batch is this data-parallel replica's, as under
DistributedDataParallel (``x.shape[0]`` is the local batch, and a reduction
over the batch is the replica's own).
"""

from __future__ import annotations

from typing import Any

import torch

from sciml.spatial_parallel.replicated import is_replicated
from sciml.spatial_parallel.split.crossings import block_of
from sciml.spatial_parallel.split.folded import whole
from sciml.spatial_parallel.split.tensor import (
    FoldedTensor,
    ReplicatedTensor,
    SplitContext,
    SplitTensor,
    unwrap,
    wrap_replicated,
    wrap_split,
)

#: The split dims of an ``(N, C, D, H, W)`` block, by mesh axis.
VOLUME_SPLIT = ((2, 0), (3, 1), (4, 2))


def wrap_inputs(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    shapes: tuple[list[Any], dict[str, Any]],
    ctx: SplitContext,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The model's split inputs as blocks of their global ``shapes`` (``None``: not split)."""

    def wrap(value: Any, shape: Any) -> Any:
        if shape is None or not isinstance(value, torch.Tensor) or is_replicated(value):
            return value
        return wrap_split(value, ctx, _local_batch(value, shape), VOLUME_SPLIT)

    positional, named = shapes
    wrapped = tuple(wrap(a, s) for a, s in zip(args, positional, strict=True))
    return wrapped, {k: wrap(v, named.get(k)) for k, v in kwargs.items()}


def unwrap_inputs(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A split layer's arguments as plain tensors (``None``: nothing to change)."""
    if not any(isinstance(a, SplitTensor | ReplicatedTensor | FoldedTensor) for a in args):
        return None
    return tuple(unwrap(a) for a in args)


def wrap_output(output: Any, shape: tuple[int, ...] | None, ctx: SplitContext) -> Any:
    """A split layer's output: replicated, or a block of the global ``shape``.

    Without a traced ``shape`` (a model that does not run on the meta device)
    the global shape of a 5-D block is asked of the other ranks.
    """
    if not isinstance(output, torch.Tensor):
        return output
    if is_replicated(output):
        return wrap_replicated(output, ctx)
    if output.dim() != 5:
        return output
    if shape is None:
        shape = ctx.mesh.global_shape(output.shape)
    return wrap_split(output, ctx, _local_batch(output, shape), VOLUME_SPLIT)


def _local_batch(block: torch.Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The global ``shape`` with this replica's batch (the block's) in place of the global one."""
    return (block.shape[0], *shape[1:])


def unwrap_outputs(output: Any) -> Any:
    """The model's outputs as plain tensors (replicated ones tagged), in tuples, lists, dicts.

    A volume computed whole on every rank (from gathered tokens) leaves as this rank's
    block, as every volume output does; a pooled one (spatial size 1) stays replicated.
    Tokens or windows merged across split dims leave gathered whole.
    """
    if isinstance(output, tuple | list):
        return type(output)(unwrap_outputs(o) for o in output)
    if isinstance(output, dict):
        return {k: unwrap_outputs(v) for k, v in output.items()}
    if isinstance(output, FoldedTensor):  # windows or tokens merged across split dims
        output = whole(output)
    if isinstance(output, ReplicatedTensor):
        shape = tuple(unwrap(output).shape)
        if len(shape) == 5 and max(shape[2:]) > 1:
            return block_of(output, output._ctx, VOLUME_SPLIT)
    return unwrap(output)
