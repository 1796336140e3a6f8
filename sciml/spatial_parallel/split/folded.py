"""Blocks of a dim that merges split dims: Swin's window batch, ViT's tokens on depth x height.

A row-major reshape that merges dims split along two mesh axes (windows numbered
across depth and height, patch tokens flattened from a depth x height split)
has no standard block: each rank's elements are strided in the merged dim. Each
rank still holds whole windows or tokens, so every op that acts on each window
or token alone runs on the blocks as they are: a
:class:`~sciml.spatial_parallel.split.tensor.FoldedTensor` keeps that layout
through pointwise ops, ops along other dims (``softmax``, ``layer_norm``,
``linear``, reductions), permutes, indexing, and contractions that keep the
merged dim (window attention, a query's rows): :mod:`.folded_ops`. A reshape
that cuts the merged dim back into its factors (Swin's window reverse, tokens back
to a volume) gives the standard blocks again. Any other op on such a block gathers
it whole first (:func:`whole`): exact, at the gathered tensor's memory.

This module holds the layout: where a reshape folds (:func:`fold_reshape`), a
whole tensor's block of a merged dim (:func:`fold_block`), and the gather.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from sciml.spatial_parallel.replicated import is_replicated
from sciml.spatial_parallel.split.crossings import block_of, split_use
from sciml.spatial_parallel.split.redistribute import gather_whole
from sciml.spatial_parallel.split.reshaped import reshaped_split
from sciml.spatial_parallel.split.tensor import (
    FoldedTensor,
    Shape,
    Split,
    SplitContext,
    local_shape,
    map_tensors,
    unwrap,
    wrap_folded,
    wrap_replicated,
    wrap_split,
)

__all__ = [
    "expanded",
    "fold_block",
    "fold_reshape",
    "gathered",
    "merged_split",
    "rewrap",
    "signature",
    "whole",
]

#: Where a layout lives on a folded block: ``(factors, (factor, mesh axis) pairs)``.
Signature = tuple[Shape, Split]


def signature(x: FoldedTensor) -> Signature:
    """Where ``x``'s blocks lie in its merged dim (equal signatures: equal layouts)."""
    return x._factors, x._fsplit


def merged_split(x: FoldedTensor) -> Split:
    """The merged dim once per mesh axis it is split along (for messages)."""
    return tuple((x._dim, axis) for _, axis in x._fsplit)


def expanded(x: FoldedTensor) -> tuple[Shape, Split]:
    """The global shape with the merged dim cut into its factors, and that shape's split."""
    dim = x._dim
    shape = (*x._gshape[:dim], *x._factors, *x._gshape[dim + 1 :])
    return shape, tuple((dim + f, a) for f, a in x._fsplit)


def whole(x: FoldedTensor) -> torch.Tensor:
    """The global tensor of the folded block ``x`` on every rank, as a replicated tensor."""
    ctx = x._ctx
    shape, split = expanded(x)
    block = unwrap(x).reshape(ctx.local_shape(shape, split))
    return wrap_replicated(gather_whole(ctx, block, split, shape).reshape(x._gshape), ctx)


def gathered(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``args`` and ``kwargs`` with every folded block gathered whole (replicated)."""

    def swap(t: torch.Tensor) -> torch.Tensor:
        return whole(t) if isinstance(t, FoldedTensor) else t

    values = map_tensors(tuple(kwargs.values()), swap)
    return map_tensors(args, swap), dict(zip(kwargs, values, strict=True))


def _fold_of(gin: Shape, gout: Shape, split: Split) -> tuple[int, Shape, Split] | None:
    """The output dim that merges every split dim of ``gin`` whole, as ``(dim, factors, split)``.

    ``gin``'s split dims must all lie within one run of dims that a row-major reshape
    merges into one output dim; the factors are that run's sizes.
    """
    dims = [d for d, _ in split]
    lowest, highest = min(dims), max(dims)
    for j, size in enumerate(gout):
        before = math.prod(gout[:j])
        for a in range(lowest + 1):
            if math.prod(gin[:a]) != before:
                continue
            for b in range(highest + 1, len(gin) + 1):
                if math.prod(gin[a:b]) == size:
                    return j, tuple(gin[a:b]), tuple((d - a, axis) for d, axis in split)
    return None


def _canonical(factors: Shape, fsplit: Split) -> tuple[Shape, Split]:
    """The factors with unsplit neighbours merged and unsplit size-1 ones dropped.

    ``(1, 2, 2, 2)`` split on factors 1, 2 and ``(2, 2, 2)`` split on 0, 1 are one layout.
    """
    split = dict(fsplit)
    merged: list[int] = []
    out_split: list[tuple[int, int]] = []
    loose = False  # whether the last merged factor is unsplit
    for f, size in enumerate(factors):
        if f in split:
            out_split.append((len(merged), split[f]))
            merged.append(size)
            loose = False
        elif size != 1:
            if loose:
                merged[-1] *= size
            else:
                merged.append(size)
            loose = True
    return tuple(merged), tuple(out_split)


def fold_reshape(
    ctx: SplitContext, block: torch.Tensor, gin: Shape, split: Split, gout: Shape
) -> torch.Tensor | None:
    """The block of ``gin`` (split as ``split``) reshaped to the global ``gout``, wrapped.

    Split dims that land whole in output dims give a split block; split dims merged
    into one output dim give a folded block; None if neither (blocks astride).
    """
    kept = reshaped_split(gin, gout, split, ctx.mesh.grid)
    if kept is not None:
        return wrap_split(block.reshape(ctx.local_shape(gout, kept)), ctx, gout, kept)
    fold = _fold_of(gin, gout, split)
    if fold is None:
        return None
    dim, factors, fsplit = fold
    factors, fsplit = _canonical(factors, fsplit)
    local = list(gout)
    local[dim] = math.prod(ctx.local_shape(factors, fsplit))
    return wrap_folded(block.reshape(local), ctx, gout, dim, factors, fsplit)


def rewrap(out: Any, x: FoldedTensor, glob: Any, dim: int) -> Any:
    """``out`` (and its tuples) folded as ``x`` at ``dim``; NotImplemented if it does not fit."""
    if isinstance(out, tuple | list):
        parts = [rewrap(o, x, g, dim) for o, g in zip(out, glob, strict=True)]
        if any(p is NotImplemented for p in parts):
            return NotImplemented
        return type(out)(parts) if isinstance(out, list) else out.__class__(parts)
    if not isinstance(out, torch.Tensor):
        return out
    gshape = tuple(glob.shape)
    expected = list(gshape)
    if not 0 <= dim < len(gshape) or gshape[dim] != x._gshape[x._dim]:
        return NotImplemented
    expected[dim] = local_shape(x)[x._dim]
    if local_shape(out) != tuple(expected):
        return NotImplemented
    return wrap_folded(out, x._ctx, gshape, dim, x._factors, x._fsplit)


def fold_block(t: torch.Tensor, x: FoldedTensor, dim: int) -> torch.Tensor:
    """This rank's block of a whole ``t`` along its merged ``dim`` (folded as ``x``)."""
    ctx = x._ctx
    full = split_use(t, ctx) if is_replicated(t) else unwrap(t)
    cut = full.unflatten(dim, x._factors)
    return block_of(cut, ctx, tuple((dim + f, a) for f, a in x._fsplit)).flatten(
        dim, dim + len(x._factors) - 1
    )
