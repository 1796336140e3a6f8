"""Predict the full ensemble's spread from a few members (Grönquist et al. 2019).

A :class:`SpreadPredictor` is a 3-D :class:`sciml.models.UNet` over ``(level, lat, lon)``
whose inputs are the ``k`` members, their spread and its log; its head keeps what the
``k`` members say about the ``M``-member spread exactly and estimates only the rest
(:func:`expected_ensemble_spread`), trained with one of :data:`LOSSES`. The derivation,
the periodic padding and the choice of losses: ``docs/spread_head.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from sciml.models import UNet
from sciml.models.unet import Norm
from sciml.weather.options import SPREAD_LOSSES as LOSSES
from sciml.weather.periodic import periodic_conv3d
from sciml.weather.postprocess.models import member_mean_sd

__all__ = [
    "FIELD_MEAN_WEIGHT",
    "LOSSES",
    "SIGMA_MIN",
    "SpreadPredictor",
    "expected_ensemble_spread",
    "expected_gaussian_crps",
    "spread_loss",
]

#: Smallest predicted standard deviation, in normalised units.
SIGMA_MIN = 1e-4
#: Weight of the field mean of the sample variance in an untrained model's estimate of the
#: underlying variance (the local sample variance's is 1).
FIELD_MEAN_WEIGHT = 0.1
Loss = Literal["l1", "mse", "log_l1", "crps"]
SPATIAL = ("lat", "lon")


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def expected_ensemble_spread(
    sample_variance: Tensor, variance: Tensor, *, members: int, ensemble: int
) -> Tensor:
    r"""The ``ensemble``-member spread expected from ``members`` of them (module docstring).

    :math:`\sqrt{((k-1)\,s_k^2 + (M-k)\,\sigma^2) / (M-1) + \sigma_{min}^2}`, elementwise.

    Args:
        sample_variance: :math:`s_k^2`, the ``k`` members' sample variance (ddof=1), >= 0.
        variance: :math:`\sigma^2`, the variance the members are drawn from, >= 0.
        members: ``k >= 2``.
        ensemble: ``M >= k``, the full ensemble's size.
    """
    _members_and_ensemble(members, ensemble)
    own, rest = (members - 1) * sample_variance, (ensemble - members) * variance
    return torch.sqrt((own + rest) / (ensemble - 1) + SIGMA_MIN**2)


def _members_and_ensemble(members: object, ensemble: object) -> None:
    if isinstance(members, bool) or not isinstance(members, int) or members < 2:
        raise ValueError(f"members must be an integer >= 2 (a spread needs two), got {members!r}")
    if isinstance(ensemble, bool) or not isinstance(ensemble, int) or ensemble < members:
        raise ValueError(
            f"ensemble (the full ensemble's size) must be an integer >= members = {members}, "
            f"got {ensemble!r}"
        )


class SpreadPredictor(nn.Module):
    """``k`` members at ``history`` lead times to the ``M``-member ensemble's standard deviation.

    Args:
        variables: ``V``, variables (each with ``levels`` levels).
        members: ``k >= 2``, members per sample.
        ensemble: ``M >= k``, the size of the ensemble whose spread is predicted.
        levels: ``D``, vertical levels (the U-Net's depth axis).
        history: Lead times stacked (1: the current one only; ``T``: it and the ``T - 1``
            before it).
        periodic: Spatial dims that wrap around, of ``("lat", "lon")``.
        base_channels: Channels of the U-Net's first level.
        depth: Poolings of lat and lon (their sizes must divide by ``2**depth``).
        norm: The U-Net's normalisation (``"group"``: per sample, the batches are small).
    """

    def __init__(
        self,
        variables: int,
        *,
        members: int,
        ensemble: int,
        levels: int,
        history: int = 1,
        periodic: Sequence[str] = ("lon",),
        base_channels: int = 16,
        depth: int = 2,
        norm: Norm = "group",
    ) -> None:
        """Build the U-Net with a zero last layer (arguments: see the class)."""
        super().__init__()
        for name, value in (("variables", variables), ("levels", levels), ("history", history)):
            _positive(name, value)
        _members_and_ensemble(members, ensemble)
        unknown = [d for d in periodic if d not in SPATIAL]
        if unknown:
            raise ValueError(f"periodic dims must be among {SPATIAL}, got {list(periodic)}")
        self.variables, self.members, self.ensemble = variables, members, ensemble
        self.levels, self.history = levels, history
        self.periodic = tuple(d for d in SPATIAL if d in periodic)
        inputs = history * (members + 2) * variables + (history - 1)
        self.unet = UNet(
            inputs,
            2 * variables,
            dims=3,
            base_channels=base_channels,
            depth=depth,
            norm=norm,
            pool=(1, 2, 2),
        )
        # (level, lat, lon) are the U-Net's dims 0, 1, 2
        periodic_conv3d(self.unet, wrap=[1 + SPATIAL.index(d) for d in self.periodic])
        for parameter in self.unet.head.parameters():
            nn.init.zeros_(parameter)

    def _check(self, history: Tensor, available: Tensor) -> None:
        expected = (self.history, self.members, self.variables * self.levels)
        if history.ndim != 6 or tuple(history.shape[1:4]) != expected:
            raise ValueError(
                f"history must be (N, T={expected[0]}, k={expected[1]}, C={expected[2]}, lat, "
                f"lon), got {tuple(history.shape)}"
            )
        if tuple(available.shape) != tuple(history.shape[:2]):
            raise ValueError(
                f"available must be (N, T) = {tuple(history.shape[:2])}, got "
                f"{tuple(available.shape)}"
            )

    def forward(self, history: Tensor, available: Tensor) -> Tensor:
        """Predicted ``M``-member standard deviation ``(N, V * D, lat, lon)``, input units.

        Args:
            history: ``(N, T, k, V * D, lat, lon)``: step 0 is the current lead time, step
                ``t`` the ``t``-th before it; channels are variable-major (as
                :class:`~sciml.weather.dataset.EnsembleDataset` folds ``level``).
            available: ``(N, T)``, 1 where the step exists, 0 where it precedes the first
                lead time (the step is then zero).
        """
        self._check(history, available)
        n, steps, k, _, h, w = history.shape
        fields = history.reshape(n, steps, k, self.variables, self.levels, h, w)
        sd = member_mean_sd(fields, dim=2)[1].unsqueeze(2)
        present = available[:, :, None, None, None, None, None].to(sd.dtype)
        log_sd = torch.log(sd + SIGMA_MIN) * present  # scale-free; 0 for a missing step
        features = torch.cat([fields, sd, log_sd], dim=2).reshape(n, -1, self.levels, h, w)
        flags = available[:, 1:, None, None, None].expand(-1, -1, self.levels, h, w)
        x = torch.cat([features, flags.to(features.dtype)], dim=1)
        local, pooled = self.unet(x).reshape(n, 2, -1, h, w).unbind(1)
        sample_variance = sd[:, 0, 0].reshape(n, -1, h, w).square()
        field_mean = sample_variance.mean((-2, -1), keepdim=True)
        variance = sample_variance * torch.exp(local) + field_mean * torch.exp(
            pooled + math.log(FIELD_MEAN_WEIGHT)
        )
        return expected_ensemble_spread(
            sample_variance, variance, members=self.members, ensemble=self.ensemble
        )


def expected_gaussian_crps(sigma: Tensor, target: Tensor) -> Tensor:
    r"""Excess expected CRPS of :math:`N(m, \sigma^2)` for outcomes :math:`\sim N(m, s^2)`.

    With :math:`X, X' \sim N(m, \sigma^2)` and :math:`Y \sim N(m, s^2)` independent,
    :math:`E\,\mathrm{CRPS} = E|X - Y| - \tfrac12 E|X - X'|
    = (\sqrt{2}\sqrt{\sigma^2 + s^2} - \sigma) / \sqrt{\pi}`, smallest (:math:`s/\sqrt\pi`)
    at :math:`\sigma = s`; this returns it minus that minimum, per point (0 when exact).

    Args:
        sigma: Predicted standard deviations, > 0.
        target: The full ensemble's standard deviations ``s``, >= 0, same shape.
    """
    if sigma.shape != target.shape:
        raise ValueError(
            f"sigma {tuple(sigma.shape)} and target {tuple(target.shape)} must have one shape"
        )
    total = math.sqrt(2) * torch.sqrt(sigma**2 + target**2) - sigma - target
    return total / math.sqrt(math.pi)


def spread_loss(model: nn.Module, batch: dict[str, Tensor], *, loss: Loss) -> Tensor:
    """Mean ``loss`` (of :data:`LOSSES`) of the model's spread against ``batch["spread"]``.

    ``model`` is a :class:`SpreadPredictor`, or one wrapped (``DistributedDataParallel``).
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    predicted, target = model(batch["history"], batch["available"]), batch["spread"]
    if loss == "l1":
        return (predicted - target).abs().mean()
    if loss == "mse":
        return (predicted - target).square().mean()
    if loss == "log_l1":
        return (predicted.log() - (target + SIGMA_MIN).log()).abs().mean()
    return expected_gaussian_crps(predicted, target).mean()
