"""Backward passes that communicate: refused, not silently wrong, when differentiated again.

A halo exchange's or a collective's backward sends and receives gradients: what
arrives from another rank has no autograd history here, so a second derivative
(``create_graph=True``, as a gradient penalty takes) would treat it as a constant
and be silently wrong. :func:`first_order_only` runs such a backward without
recording a graph and, when one is being built, attaches a node that raises a
clear error if the second derivative ever reaches it (first-order gradients
taken with ``create_graph=True`` stay correct and free).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


class SecondDerivativeError(RuntimeError):
    """A second derivative reached the backward of a communicating parallel op."""


class _Refused(torch.autograd.Function):
    """Passes the first-order gradients on; raises when differentiated through."""

    @staticmethod
    def forward(ctx: Any, what: str, computed: tuple[torch.Tensor, ...], *_grads: Any) -> Any:
        ctx.what = what
        return computed

    @staticmethod
    def backward(ctx: Any, *_grads: Any) -> Any:
        raise SecondDerivativeError(
            f"a second derivative (create_graph=True) reached the backward of {ctx.what}, "
            "whose gradients come from other ranks without autograd history: differentiate "
            "a parallel model once (first-order gradients with create_graph=True are fine) "
            "or take higher derivatives on one device"
        )


Backward = Callable[..., Any]


def first_order_only(what: str) -> Callable[[Backward], Backward]:
    """Decorate an autograd backward that communicates (``what`` names it in the error)."""

    def decorate(backward: Backward) -> Backward:
        @functools.wraps(backward)
        def wrapper(ctx: Any, *grads: Any) -> Any:
            with torch.no_grad():
                out = backward(ctx, *grads)
            tracked = [g for g in grads if isinstance(g, torch.Tensor) and g.requires_grad]
            if not (torch.is_grad_enabled() and tracked):
                return out
            outs = out if isinstance(out, tuple) else (out,)
            where = [i for i, t in enumerate(outs) if isinstance(t, torch.Tensor)]
            if not where:
                return out
            marked = _Refused.apply(what, tuple(outs[i] for i in where), *tracked)
            replaced = list(outs)
            for i, tensor in zip(where, marked, strict=True):
                replaced[i] = tensor
            return tuple(replaced) if isinstance(out, tuple) else replaced[0]

        return wrapper

    return decorate
