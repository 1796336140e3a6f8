"""Differentiable CRPS losses in torch (same definitions as :mod:`sciml.weather.metrics`).

Use these to train ensemble or distributional post-processing models. They take plain
tensors; ``member_dim`` is an axis index. Per-point weights (cos-latitude, ``|EFI|``) give
a weighted mean ``sum(w * s) / sum(w)``; they broadcast to the per-point score by NumPy's
rules (trailing axes) and must be finite, non-negative and not all zero. Parameters never
enlarge the observations' shape (no silent broadcasting of the target). Unlike the
metrics, NaNs propagate: mask missing points before computing a loss.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = ["crps_ensemble_loss", "crps_gaussian_loss", "twcrps_ensemble_loss"]


def _check_weights(weights: Tensor, shape: torch.Size) -> None:
    try:
        torch.broadcast_to(weights, shape)
    except RuntimeError:
        raise ValueError(
            f"weights of shape {tuple(weights.shape)} do not broadcast to the per-point score "
            f"{tuple(shape)}"
        ) from None
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        raise ValueError("weights must be finite and non-negative (got NaN, inf or < 0)")
    if not bool((weights != 0).any()):
        raise ValueError("weights are all zero")


def _reduce(score: Tensor, reduction: str, weights: Tensor | None) -> Tensor:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if weights is not None:
        _check_weights(weights, score.shape)
        weights = torch.broadcast_to(weights, score.shape).to(score.dtype)
        if reduction == "mean":
            return (score * weights).sum() / weights.sum()
        score = score * weights
    if reduction == "mean":
        return score.mean()
    if reduction == "sum":
        return score.sum()
    return score


def crps_ensemble_loss(
    observations: Tensor,
    forecasts: Tensor,
    *,
    member_dim: int = -1,
    fair: bool = False,
    weights: Tensor | None = None,
    reduction: str = "mean",
) -> Tensor:
    """Ensemble CRPS (standard or fair), computed by sorting the members: O(M log M).

    Args:
        observations: Verifying values, shape of ``forecasts`` without ``member_dim``.
        forecasts: Ensemble tensor.
        member_dim: Axis of the members in ``forecasts``.
        fair: Fair CRPS (Ferro 2014) instead of the standard one.
        weights: Per-point weights, broadcast to the per-point score.
        reduction: ``"mean"`` (weighted when ``weights`` given), ``"sum"`` or ``"none"``.
    """
    ens = forecasts.movedim(member_dim, -1)
    members = ens.shape[-1]
    if ens.shape[:-1] != observations.shape:
        raise ValueError(
            f"observations have shape {tuple(observations.shape)}, expected the forecasts' "
            f"shape without the member axis {tuple(ens.shape[:-1])}"
        )
    if members < (2 if fair else 1):
        raise ValueError(
            f"the {'fair ' if fair else ''}CRPS needs at least {2 if fair else 1} "
            f"member(s), got {members}"
        )
    ordered = torch.sort(ens, dim=-1).values
    # sum_ij |x_i - x_j| = 2 sum_i (2i - M - 1) x_(i); the rank weights sum to zero, so
    # centring on the smallest member changes nothing but the rounding.
    rank = torch.arange(1, members + 1, dtype=ens.dtype, device=ens.device)
    rank_weights = 2 * rank - members - 1
    spread = ((ordered - ordered[..., :1]) * rank_weights).sum(-1)
    spread = spread / (members * (members - 1) if fair else members**2)
    score = (ens - observations.unsqueeze(-1)).abs().mean(-1) - spread
    return _reduce(score, reduction, weights)


def crps_gaussian_loss(
    observations: Tensor,
    mu: Tensor,
    sigma: Tensor,
    *,
    weights: Tensor | None = None,
    reduction: str = "mean",
) -> Tensor:
    """Closed-form CRPS of N(mu, sigma^2).

    Args:
        observations: Verifying values.
        mu: Forecast mean, broadcastable to ``observations`` (never enlarging it).
        sigma: Forecast standard deviation, > 0 (e.g. a softplus plus a small floor),
            broadcastable to ``observations``.
        weights: Per-point weights, broadcast to the per-point score.
        reduction: ``"mean"`` (weighted when ``weights`` given), ``"sum"`` or ``"none"``.

    Raises:
        ValueError: If a shape would enlarge the observations, or a ``sigma`` is <= 0.
    """
    mu, sigma = torch.as_tensor(mu), torch.as_tensor(sigma)
    try:  # numpy's: torch's costs a third of a millisecond, a fifth of an EMOS fit
        shape = np.broadcast_shapes(observations.shape, mu.shape, sigma.shape)
    except ValueError:
        shape = None
    if shape != observations.shape:
        raise ValueError(
            f"mu {tuple(mu.shape)} and sigma {tuple(sigma.shape)} must broadcast to the "
            f"observations' shape {tuple(observations.shape)} without enlarging it"
        )
    # not inside torch.func.vmap (fused copies, sciml.training.fused), where a value cannot
    # decide: there a sigma <= 0 gives a NaN score, which fit refuses
    if not torch._C._functorch.is_batchedtensor(sigma) and bool((sigma <= 0).any()):
        raise ValueError("sigma must be > 0 (0 or negative values give no distribution)")
    z = (observations - mu) / sigma
    pdf = torch.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
    score = sigma * (z * (2 * torch.special.ndtr(z) - 1) + 2 * pdf - 1 / math.sqrt(math.pi))
    return _reduce(score, reduction, weights)


def twcrps_ensemble_loss(
    observations: Tensor,
    forecasts: Tensor,
    *,
    a: float = -math.inf,
    b: float = math.inf,
    member_dim: int = -1,
    fair: bool = False,
    weights: Tensor | None = None,
    reduction: str = "mean",
) -> Tensor:
    """Threshold-weighted CRPS with the chaining function ``v(x) = clamp(x, a, b)``."""
    if not a < b:
        raise ValueError(f"twcrps needs a < b, got a={a}, b={b}")
    return crps_ensemble_loss(
        observations.clamp(a, b),
        forecasts.clamp(a, b),
        member_dim=member_dim,
        fair=fair,
        weights=weights,
        reduction=reduction,
    )
