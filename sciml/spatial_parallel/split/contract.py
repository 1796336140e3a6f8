"""Contractions on split blocks: ``einsum``, ``matmul`` and attention.

- ``einsum`` whose split indices all reach the output, each split alike in every
  operand that has it (tokens against a plain weight, windows against their own
  keys): computed on the blocks as they are, the result split along those indices;
- any other contraction of a split operand (queries against every key,
  ``q @ k.transpose(-2, -1)``, ``scaled_dot_product_attention``): its split operands
  gathered whole on every rank and the result replicated, each rank computing all
  of it; the backward keeps each rank's block of the gradient
  (:func:`~sciml.spatial_parallel.split.redistribute.gather_whole`). Exact, at the
  memory of the whole operands: a transformer's tokens, not a full-resolution volume.
"""

from __future__ import annotations

from typing import Any

from sciml.spatial_parallel.replicated import is_replicated
from sciml.spatial_parallel.split.crossings import replicated_op, split_use
from sciml.spatial_parallel.split.redistribute import gather_whole
from sciml.spatial_parallel.split.tensor import (
    Split,
    SplitContext,
    SplitTensor,
    global_result,
    unwrap,
    wrap_replicated,
    wrap_split,
)

__all__ = ["HANDLERS", "gathered"]


def gathered(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func`` on its split operands gathered whole: a replicated result on every rank."""

    def whole(value: Any) -> Any:
        if isinstance(value, SplitTensor):
            block = unwrap(value)
            return wrap_replicated(gather_whole(ctx, block, value._split, value._gshape), ctx)
        if isinstance(value, list | tuple):
            return type(value)(whole(v) for v in value)
        return value

    return replicated_op(func, whole(args), {k: whole(v) for k, v in kwargs.items()})


def _operands(args: tuple[Any, ...]) -> list[Any]:
    """``torch.einsum(eq, a, b)`` and ``torch.einsum(eq, [a, b])`` alike."""
    if len(args) == 2 and isinstance(args[1], list | tuple):
        return list(args[1])
    return list(args[1:])


def _local_split(equation: Any, operands: list[Any]) -> Split | None:
    """The output's split if every split index reaches it, split alike wherever it occurs."""
    if not isinstance(equation, str) or "..." in equation or "->" not in equation:
        return None
    inputs, output = equation.replace(" ", "").split("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        return None
    letters: dict[str, tuple[int, int]] = {}  # index -> (mesh axis, global size)
    for term, operand in zip(terms, operands, strict=True):
        for dim, axis in getattr(operand, "_split", ()):
            found = letters.setdefault(term[dim], (axis, operand._gshape[dim]))
            if found != (axis, operand._gshape[dim]):
                return None
    axes = [axis for axis, _ in letters.values()]
    if len(set(axes)) != len(axes) or any(letter not in output for letter in letters):
        return None
    for term, operand in zip(terms, operands, strict=True):
        for letter, (axis, _) in letters.items():
            if letter in term and (term.index(letter), axis) not in getattr(operand, "_split", ()):
                return None  # a whole operand along a split index: contract it gathered
    return tuple(sorted((output.index(letter), axis) for letter, (axis, _) in letters.items()))


def _einsum(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    operands = _operands(args)
    split = None if kwargs else _local_split(args[0], operands)
    if split is None:
        return gathered(ctx, func, args, kwargs)
    gshape = tuple(global_result(func, args, kwargs).shape)

    def local(t: Any) -> Any:
        return split_use(t, ctx) if is_replicated(t) else unwrap(t)

    return wrap_split(func(args[0], *(local(t) for t in operands)), ctx, gshape, split)


#: Handlers by op name (read by :mod:`.dispatch`).
HANDLERS = {
    "einsum": _einsum,
    **dict.fromkeys(("matmul", "bmm", "baddbmm", "mm", "scaled_dot_product_attention"), gathered),
}
