"""Halo exchange as autograd functions: assemble the input range a rank's output block needs.

:func:`halo_extend` runs one :class:`~sciml.spatial_parallel.halo.exchange.Exchange`
along a :class:`~sciml.spatial_parallel.halo.plan.HaloPlan` as an autograd
function; :func:`halo_start` / :func:`halo_finish` split it in two so that a
layer can compute its interior while messages are in flight (forward and
backward), and :func:`assemble` / :func:`add_into` put the pieces of such an
output block together (geometry: :mod:`sciml.spatial_parallel.halo.overlap`).
"""

from __future__ import annotations

from typing import Any

import torch

from sciml.spatial_parallel.halo.exchange import Exchange, take
from sciml.spatial_parallel.halo.first_order import first_order_only
from sciml.spatial_parallel.halo.overlap import Box
from sciml.spatial_parallel.halo.plan import HaloPlan


def box_index(axes: tuple[int, ...], box: Box) -> tuple[slice, ...]:
    """The index of ``box`` (on ``axes``) into an (N, C, D, H, W) tensor."""
    index = [slice(None)] * 5
    for axis, (lo, hi) in zip(axes, box, strict=True):
        index[axis] = slice(lo, hi)
    return tuple(index)


class _Assemble(torch.autograd.Function):
    """Write output pieces into one block; the backward hands back views of the gradient."""

    @staticmethod
    def forward(
        ctx: Any, shape: list[int], axes: tuple[int, ...], boxes: list[Box], *parts: torch.Tensor
    ) -> torch.Tensor:
        ctx.index = [box_index(axes, box) for box in boxes]
        out = parts[0].new_empty(shape)
        for index, part in zip(ctx.index, parts, strict=True):
            out[index] = part
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return (None, None, None, *(grad[index] for index in ctx.index))


def assemble(
    shape: list[int], axes: tuple[int, ...], boxes: list[Box], parts: list[torch.Tensor]
) -> torch.Tensor:
    """One tensor of ``shape`` made of ``parts``, each written at its box on ``axes``."""
    return _Assemble.apply(shape, axes, boxes, *parts)


class _AddInto(torch.autograd.Function):
    """``out[index] += part`` in place, without autograd's full-size gradient copy.

    Autograd's view bookkeeping would copy the whole gradient; the backward hands
    ``out``'s gradient through and a view of it to ``part``.
    """

    @staticmethod
    def forward(ctx: Any, out: torch.Tensor, index: tuple[slice, ...], *parts: Any) -> Any:
        ctx.index = index
        ctx.mark_dirty(out)
        for box_index, part in zip(index, parts, strict=True):
            out[box_index] += part
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return (grad, None, *(grad[box_index] for box_index in ctx.index))


def add_into(
    out: torch.Tensor, axes: tuple[int, ...], boxes: list[Box], parts: list[torch.Tensor]
) -> torch.Tensor:
    """``out`` with each of ``parts`` added in place at its box on ``axes``."""
    return _AddInto.apply(out, tuple(box_index(axes, box) for box in boxes), *parts)


class _HaloExtend(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, plan: HaloPlan) -> torch.Tensor:
        exchange = Exchange(plan, x, plan.group)
        exchange.start()
        exchange.wait()
        ctx.exchange = exchange
        out = exchange.materialize(plan.full_box)
        exchange.release()
        return out

    @staticmethod
    @first_order_only("a halo exchange")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        exchange: Exchange = ctx.exchange
        exchange.start_backward([(exchange.plan.full_box, grad)])
        return exchange.finish_backward(None), None


@torch.compiler.disable  # collectives: run eagerly under torch.compile
def halo_extend(x: torch.Tensor, plan: HaloPlan) -> torch.Tensor:
    """``x`` extended (or trimmed) to the input range its output block needs.

    When the rank needs only its own data and nothing is exchanged, the result
    is a view of ``x`` (no copy).
    """
    regions = plan.regions
    if (
        not plan.needs_exchange
        and len(regions) == 1
        and regions[0].kind == "local"
        and all(isinstance(i, slice) for i in regions[0].index)
    ):
        return take(x, plan.axes, regions[0].index)
    return _HaloExtend.apply(x, plan)


class _HaloStart(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, exchange: Exchange) -> tuple[torch.Tensor, torch.Tensor]:
        exchange.start()
        ctx.exchange = exchange
        return x.view_as(x), x.new_zeros(0)

    @staticmethod
    @first_order_only("a halo exchange")
    def backward(ctx: Any, grad: torch.Tensor | None, _token: Any) -> tuple[torch.Tensor, None]:
        return ctx.exchange.finish_backward(grad), None


class _HaloFinish(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, token: torch.Tensor, exchange: Exchange, *boxes: Box) -> Any:
        exchange.wait()
        ctx.exchange, ctx.boxes = exchange, boxes
        out = tuple(exchange.materialize(box) for box in boxes)
        exchange.release()
        return out

    @staticmethod
    @first_order_only("a halo exchange")
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        pairs = [(box, g) for box, g in zip(ctx.boxes, grads, strict=True) if g is not None]
        ctx.exchange.start_backward(pairs)
        return (ctx.exchange.like.new_zeros(0), None, *(None for _ in ctx.boxes))


@torch.compiler.disable  # collectives: run eagerly under torch.compile
def halo_start(x: torch.Tensor, plan: HaloPlan) -> tuple[torch.Tensor, torch.Tensor, Exchange]:
    """Post the exchange of ``x`` without waiting for it.

    Returns:
        ``x`` (to compute the interior from), a token for :func:`halo_finish`, and the
        exchange.
    """
    exchange = Exchange(plan, x, plan.group)
    alias, token = _HaloStart.apply(x, exchange)
    return alias, token, exchange


@torch.compiler.disable  # collectives: run eagerly under torch.compile
def halo_finish(
    token: torch.Tensor, exchange: Exchange, boxes: list[Box], *, halo_only: bool = False
) -> tuple[torch.Tensor, ...]:
    """Wait for the exchange and return the extended input restricted to each box.

    With ``halo_only`` the rank's own data and the padding read as zeros: the
    boxes then hold only what the neighbours sent (for additive corrections).
    In the backward pass the halo gradients of these boxes are sent back
    while the interior's backward runs; :func:`halo_start`'s backward adds
    them up. Without ``boxes`` the exchange is completed and nothing is read.
    """
    exchange.halo_only = halo_only
    if not boxes:  # this rank only sends; its backward still answers in halo_start's backward
        exchange.wait()
        exchange.release()
        return ()
    return _HaloFinish.apply(token, exchange, *boxes)
