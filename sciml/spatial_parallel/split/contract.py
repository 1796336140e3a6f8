"""Contractions on split blocks: ``einsum``, ``matmul`` and attention.

(Contractions of folded blocks, tokens merged across split dims: :mod:`.folded_ops`.)

``einsum``, ``matmul``, ``bmm`` and ``scaled_dot_product_attention`` (read as an
einsum over queries and keys, :func:`contraction_of`) keep the split of their
first split operand along the indices that reach the output (queries split along
their tokens, windows along the window batch) and compute on the blocks: an
operand split otherwise (the keys and values, split along the tokens the queries
attend to) is gathered whole on every rank first, and a whole operand (a weight,
a gathered one, an attention bias) takes this rank's block along the kept
indices. Each rank then holds its queries' rows of the attention, not all of
them. Where nothing can be kept (a split index contracted in every operand,
attention with dropout or a causal mask, ``multi_head_attention_forward``), every
split operand is gathered and the result is replicated, each rank computing all
of it. The gathers' backward keeps each rank's block of a gradient summed over
the ranks that used it
(:func:`~sciml.spatial_parallel.split.redistribute.gather_whole`,
:func:`~sciml.spatial_parallel.split.crossings.split_use`). Exact, at the memory
of the gathered operands: a transformer's keys and values, not a volume.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from sciml.spatial_parallel.split.binding import schema_arguments
from sciml.spatial_parallel.split.crossings import block_of, replicated_op
from sciml.spatial_parallel.split.op_names import aten_name
from sciml.spatial_parallel.split.redistribute import gather_whole
from sciml.spatial_parallel.split.tensor import (
    SplitContext,
    SplitTensor,
    global_result,
    unwrap,
    wrap_replicated,
    wrap_split,
)

__all__ = ["CONTRACTIONS", "HANDLERS", "TOKEN_MIXING", "Contraction", "contraction_of", "gathered"]

#: The calls computed on blocks where their splits line up (:func:`contraction_of`).
CONTRACTIONS = ("einsum", "matmul", "bmm", "scaled_dot_product_attention")
#: Contractions over tokens: their split operands are gathered unless they line up
#: (``einsum``, ``matmul``, ``bmm``: :func:`_kept`); the planner refuses to price them.
TOKEN_MIXING = frozenset(
    {
        *("einsum", "matmul", "bmm", "baddbmm", "mm"),
        *("scaled_dot_product_attention", "multi_head_attention_forward"),
    }
)


def _whole(ctx: SplitContext, t: Any) -> Any:
    """A split operand gathered whole on every rank, as a replicated tensor."""
    return wrap_replicated(gather_whole(ctx, unwrap(t), t._split, t._gshape), ctx)


def gathered(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func`` on its split operands gathered whole: a replicated result on every rank."""

    def whole(value: Any) -> Any:
        if isinstance(value, SplitTensor):
            return _whole(ctx, value)
        if isinstance(value, list | tuple):
            return type(value)(whole(v) for v in value)
        return value

    return replicated_op(func, whole(args), {k: whole(v) for k, v in kwargs.items()})


def _kept(terms: list[str], output: str, operands: list[Any]) -> tuple[dict[str, int], set[int]]:
    """The splits the result keeps (index -> mesh axis), and the operands computed as blocks.

    The first split operand's splits come first. A split operand joins if each of its
    split indices reaches the output on an axis no other kept index uses, and it is
    split alike along every kept index it has; the others are gathered.
    """
    kept: dict[str, tuple[int, int]] = {}  # index -> (mesh axis, global size)
    joined: set[int] = set()
    for i, (term, operand) in enumerate(zip(terms, operands, strict=True)):
        if not isinstance(operand, SplitTensor):
            continue
        mine = {term[d]: (a, operand._gshape[d]) for d, a in operand._split}
        used = {axis for letter, (axis, _) in kept.items() if letter not in mine}
        if all(
            letter in output and kept.get(letter, found) == found and found[0] not in used
            for letter, found in mine.items()
        ) and all(letter in mine for letter in kept if letter in term):
            kept |= mine
            joined.add(i)
    return {letter: axis for letter, (axis, _) in kept.items()}, joined


class Contraction(NamedTuple):
    """A call as an einsum: ``fn(*operands)``, the operands indexed by ``terms``."""

    fn: Callable[..., Any]
    operands: tuple[Any, ...]
    terms: list[str]
    output: str


def _on_blocks(ctx: SplitContext, call: Contraction) -> Any:
    """The call computed on blocks of its operands, the result split along the kept indices.

    None if no split can be kept.
    """
    fn, operands, terms, output = call
    if any(len(set(index)) != len(index) for index in (*terms, output)):
        return None  # a diagonal: not on blocks
    kept, joined = _kept(terms, output, list(operands))
    if not kept:
        return None
    prepared = []
    for n, (term, operand) in enumerate(zip(terms, operands, strict=True)):
        if n in joined:
            prepared.append(unwrap(operand))
            continue
        if isinstance(operand, SplitTensor):  # split otherwise: gathered, then its block
            operand = _whole(ctx, operand)
        along = tuple(
            (d, kept[letter])
            for d, letter in enumerate(term)
            if letter in kept and operand.shape[d] != 1
        )
        prepared.append(block_of(operand, ctx, along))
    gshape = tuple(global_result(fn, operands, {}).shape)
    split = tuple(sorted((output.index(letter), axis) for letter, axis in kept.items()))
    return wrap_split(fn(*prepared), ctx, gshape, split)


_ATTENTION = torch.ops.aten.scaled_dot_product_attention.default


def _attention(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Contraction | None:
    """``scaled_dot_product_attention`` as an einsum over queries ``l``, keys ``s``.

    None with dropout (a draw on each rank's rows is not the single-device draw's
    block) or a causal mask (it needs each row's global index): those are gathered.
    """
    call = schema_arguments(_ATTENTION, args, kwargs)
    if call["dropout_p"] or call["is_causal"]:
        return None
    query, key, value, mask = (call[n] for n in ("query", "key", "value", "attn_mask"))
    operands = (query, key, value) if mask is None else (query, key, value, mask)
    if min(t.dim() for t in (query, key, value)) < 2:
        return None
    batch = "abcdefgh"[: max(t.dim() for t in operands) - 2]
    full = {"q": batch + "le", "k": batch + "se", "v": batch + "sf", "m": batch + "ls"}
    terms = [full[n][len(full[n]) - t.dim() :] for n, t in zip("qkvm", operands, strict=False)]
    options = {"scale": call["scale"], "enable_gqa": call["enable_gqa"]}

    def attend(q: Any, k: Any, v: Any, m: Any = None) -> Any:
        return func(q, k, v, attn_mask=m, **options)

    return Contraction(attend, operands, terms, batch + "lf")


def contraction_of(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Contraction | None:
    """An ``einsum``, ``matmul``, ``bmm`` or attention call as an einsum (:class:`Contraction`).

    ``matmul`` operands of rank >= 2 broadcast their batch dims from the right; None for
    calls without such a form (keywords, ellipses, operand lists, vectors).
    """
    name = aten_name(func)
    if name == "scaled_dot_product_attention":
        return _attention(func, args, kwargs)
    if kwargs or getattr(func, "__name__", "") == "__rmatmul__":  # operands swapped
        return None
    if name == "einsum":
        equation = args[0]
        if len(args) < 2 or not isinstance(equation, str) or "->" not in equation:
            return None
        inputs, output = equation.replace(" ", "").split("->")
        terms = inputs.split(",")
        if "." in equation or len(terms) != len(args) - 1:
            return None
        return Contraction(lambda *ops: func(equation, *ops), args[1:], terms, output)
    if len(args) != 2 or min(args[0].dim(), args[1].dim()) < 2:
        return None
    batch = "abcdefgh"[: max(args[0].dim(), args[1].dim()) - 2]
    pairs = zip(args, ("ik", "kj"), strict=True)
    terms = [batch[len(batch) - (t.dim() - 2) :] + pair for t, pair in pairs]
    return Contraction(func, args, terms, batch + "ij")


def _contract(ctx: SplitContext, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A contraction on blocks where a split can be kept, else gathered."""
    call = contraction_of(func, args, kwargs)
    out = None if call is None else _on_blocks(ctx, call)
    return gathered(ctx, func, args, kwargs) if out is None else out


#: Handlers by op name (read by :mod:`.dispatch`).
HANDLERS = {
    **dict.fromkeys(TOKEN_MIXING, gathered),
    **dict.fromkeys(CONTRACTIONS, _contract),
}
