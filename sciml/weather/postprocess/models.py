r"""Deep post-processing of an ensemble subset into a Gaussian forecast (the shared parts).

Every deep post-processor reads ``k >= 2`` members (``(N, k, C, H, W)``, normalised
channels), optional static fields ``(N, S, H, W)`` and the lead time ``(N,)`` in days, and
returns ``(mu, sigma)``, each ``(N, C, H, W)``. Its ``4C`` outputs
:math:`(o_0, o_1, o_2, o_3)` per channel enter the residual Gaussian head
(:func:`residual_gaussian`), ENS-10's (Ashkboos et al. 2022) with two additive terms:

.. math::
    \mu = \bar x + s\,o_0 + o_2, \qquad
    \sigma = s\,e^{o_1} + \operatorname{softplus}(o_3 + b), \quad
    b = \log(e^{\sigma_{min}} - 1),

with :math:`\bar x, s` the members' mean and standard deviation (ddof=1). The last layer
starts at zero, so a new model forecasts the raw ensemble's Gaussian (plus
:data:`SIGMA_MIN`). The additive terms matter where the raw spread carries no
information: at short lead times the members start close together (an under-dispersive
ensemble has :math:`s \approx 0` at lead 0), so ``s exp(o1)`` would need huge, unstable
:math:`o_1` to reach the real error and ``s o0`` could not correct the mean at all; the
learned floor ``softplus(o3 + b)`` and offset ``o2`` give the model a spread and a mean
correction of their own that do not scale with :math:`s`.

The lead time is a constant input channel, ``lead_days /`` :data:`LEAD_SCALE_DAYS`: error
growth with lead time is the main thing a per-point model cannot infer from one sample
(without it the per-point MLP widened its lead-0 forecasts by the factor right for day 6).

Models: :class:`PostProcessor` (``"mlp"``, the same small MLP at every grid point, or
``"unet"``, a 2-D :class:`sciml.models.UNet` over (lat, lon)), and in sibling modules
:class:`~sciml.weather.postprocess.mixed.MixedPostProcessor` and
:class:`~sciml.weather.postprocess.pooled.PooledPostProcessor`. All train on the closed-form
Gaussian CRPS plus the model's :meth:`~GaussianPostProcessor.regularisation`
(:func:`gaussian_crps_loss`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sciml.models import UNet
from sciml.training.checkpoint import unwrap
from sciml.weather.metrics.losses import crps_gaussian_loss
from sciml.weather.periodic import periodic_lon
from sciml.weather.postprocess.registry import MODELS

if TYPE_CHECKING:
    from sciml.weather.postprocess.config import PostprocessConfig

__all__ = [
    "BACKBONES",
    "LEAD_SCALE_DAYS",
    "SIGMA_MIN",
    "GaussianPostProcessor",
    "PostProcessor",
    "build_mlp",
    "build_postprocessor",
    "build_unet",
    "gaussian_crps_loss",
    "member_mean_sd",
    "residual_gaussian",
    "zero_last_conv",
]

#: Smallest forecast standard deviation, in normalised units.
SIGMA_MIN = 1e-3
#: The lead-time channel is ``lead_days / LEAD_SCALE_DAYS``: O(1) over a medium range.
LEAD_SCALE_DAYS = 10.0
BACKBONES = ("mlp", "unet")
Backbone = Literal["mlp", "unet"]
_FLOOR_OFFSET = math.log(math.expm1(SIGMA_MIN))


def _check_count(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def member_mean_sd(members: Tensor, *, dim: int = 1) -> tuple[Tensor, Tensor]:
    """The mean and standard deviation (ddof=1) over the members along ``dim``.

    Two passes (the mean, then the squared deviations from it): as accurate as
    ``Tensor.std`` to a float32 rounding or two, and far faster on the CPU, whose ``std``
    over a middle dim of a few members was the slowest op of a post-processor's step
    (``torch.profiler`` of a step of ``benchmarks/weather_fused_sweeps.py``'s models).
    Where the members are identical (a masked point, a feature every member's ReLU
    zeroes) the deviation is 0 with a zero gradient: ``sqrt``'s infinite slope at 0 times
    the zero slope of the squares would be NaN.
    """
    mean = members.mean(dim, keepdim=True)
    variance = (members - mean).square().sum(dim) / (members.shape[dim] - 1)
    spread = variance > 0
    return mean.squeeze(dim), torch.where(spread, variance.where(spread, 1.0).sqrt(), 0.0)


def residual_gaussian(mean: Tensor, sd: Tensor, out: Tensor) -> tuple[Tensor, Tensor]:
    """``(mu, sigma)`` of the residual head (module docstring) from ``4C`` outputs ``out``."""
    o0, o1, o2, o3 = out.chunk(4, dim=1)
    mu = mean + sd * o0 + o2
    sigma = sd * torch.exp(o1) + F.softplus(o3 + _FLOOR_OFFSET)
    return mu, sigma


def zero_last_conv(module: nn.Module) -> None:
    """Zero the weights and bias of the last ``Conv2d`` of ``module`` (the head's start)."""
    last = [m for m in module.modules() if isinstance(m, nn.Conv2d)][-1]
    nn.init.zeros_(last.weight)
    if last.bias is not None:
        nn.init.zeros_(last.bias)


class GaussianPostProcessor(nn.Module):
    """Base of the deep post-processors: input checks, shared features, regularisation.

    Args:
        channels: ``C``, channels per member.
        static: Static fields ``S`` given with every sample (0: none).
        lead_time: Whether the model reads the lead time (a constant input channel).
    """

    def __init__(self, channels: int, *, static: int = 0, lead_time: bool = True) -> None:
        """Check the sizes (arguments: see the class)."""
        super().__init__()
        _check_count("channels", channels, 1)
        _check_count("static", static, 0)
        self.channels, self.static, self.lead_time = channels, static, bool(lead_time)

    @property
    def extra_inputs(self) -> int:
        """Channels beside the members' statistics: static fields and the lead time."""
        return self.static + int(self.lead_time)

    def extras(
        self, members: Tensor, static: Tensor | None, lead_time: Tensor | None
    ) -> list[Tensor]:
        """Check the inputs; the static fields and the lead-time channel, ``(N, ., H, W)``."""
        n, _, _, h, w = self._check_members(members)
        if (static is None) != (self.static == 0) or (
            static is not None and tuple(static.shape) != (n, self.static, h, w)
        ):
            got = None if static is None else tuple(static.shape)
            raise ValueError(
                f"expected {self.static} static field(s) as (N={n}, S={self.static}, H={h}, "
                f"W={w}), got {got}"
            )
        out = [] if static is None else [static.to(members.dtype)]
        if not self.lead_time:
            return out
        if lead_time is None:
            raise ValueError(
                "the lead time is missing: pass lead_time (N,) in days (EnsembleDataset gives "
                "it for a timedelta 'lead_time' coordinate), or build the model with "
                "lead_time=False"
            )
        if tuple(lead_time.shape) != (n,):  # values: checked where they are read (no host sync)
            raise ValueError(
                f"lead_time must be {n} lead times in days (N,), got shape {tuple(lead_time.shape)}"
            )
        days = lead_time.to(members.dtype) / LEAD_SCALE_DAYS
        return [*out, days[:, None, None, None].expand(n, 1, h, w)]

    def _check_members(self, members: Tensor) -> torch.Size:
        if members.ndim != 5 or members.shape[1] < 2 or members.shape[2] != self.channels:
            raise ValueError(
                f"members must be (N, k >= 2, C={self.channels}, H, W), got {tuple(members.shape)}"
            )
        return members.shape

    def regularisation(self) -> Tensor:
        """A penalty added to the training loss (none here), on the parameters' device."""
        first = next(self.parameters(), None)
        return torch.zeros((), device=None if first is None else first.device)


class PointwiseConv2d(nn.Conv2d):
    """A 1x1 ``Conv2d`` computed as a matrix product over the channels (same parameters).

    oneDNN's 1x1 convolution of a few channels was among the MLP's slowest ops on the CPU;
    the matrix product is faster there. Its output is laid out channels-last, which the
    next such layer reads without a copy.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        """A ``Conv2d(in_channels, out_channels, 1)``."""
        super().__init__(in_channels, out_channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        """``Conv2d.forward`` as ``F.linear`` over the channel dim of ``(N, C, H, W)``."""
        return F.linear(x.movedim(1, -1), self.weight.flatten(1), self.bias).movedim(-1, 1)


def _mlp(inputs: int, outputs: int, hidden: int) -> nn.Module:
    return nn.Sequential(
        PointwiseConv2d(inputs, hidden),
        nn.ReLU(),
        PointwiseConv2d(hidden, hidden),
        nn.ReLU(),
        PointwiseConv2d(hidden, outputs),
    )


class PostProcessor(GaussianPostProcessor):
    """ENS-10 baselines: ``[mean, sd, static, lead]`` through an MLP or a U-Net, residual head.

    Args:
        channels: ``C``, channels per member.
        static: Static fields ``S`` given with every sample (0: none).
        lead_time: Whether the model reads the lead time.
        backbone: ``"mlp"`` (per grid point) or ``"unet"``.
        hidden: Width of the MLP.
        base_channels: Channels of the U-Net's first level.
        depth: Poolings of the U-Net (the grid must divide by ``2**depth``).
        periodic: Circular padding in longitude (the last dim) for the U-Net's convolutions.
    """

    def __init__(
        self,
        channels: int,
        *,
        static: int = 0,
        lead_time: bool = True,
        backbone: Backbone = "mlp",
        hidden: int = 32,
        base_channels: int = 16,
        depth: int = 2,
        periodic: bool = False,
    ) -> None:
        """Build the backbone with a zero last layer (arguments: see the class)."""
        super().__init__(channels, static=static, lead_time=lead_time)
        if backbone not in BACKBONES:
            raise ValueError(f"backbone must be one of {BACKBONES}, got {backbone!r}")
        _check_count("hidden", hidden, 1)
        inputs, outputs = 2 * channels + self.extra_inputs, 4 * channels
        self.backbone = (
            _mlp(inputs, outputs, hidden)
            if backbone == "mlp"
            else UNet(inputs, outputs, dims=2, base_channels=base_channels, depth=depth)
        )
        if periodic:
            periodic_lon(self.backbone)
        zero_last_conv(self.backbone)

    def forward(
        self, members: Tensor, static: Tensor | None = None, lead_time: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(mu, sigma)``, each ``(N, C, H, W)``, from members ``(N, k, C, H, W)``."""
        extras = self.extras(members, static, lead_time)
        mean, sd = member_mean_sd(members)
        out = self.backbone(torch.cat([mean, sd, *extras], dim=1))
        return residual_gaussian(mean, sd, out)


def build_postprocessor(config: PostprocessConfig, channels: int) -> GaussianPostProcessor:
    """The untrained network of a run's deep model, by its entry's builder.

    The entry is ``config.model``'s in :data:`~sciml.weather.postprocess.registry.MODELS`.
    """
    model: GaussianPostProcessor = MODELS[config.model].function("build")(config, channels)
    return model


def build_mlp(config: PostprocessConfig, channels: int) -> PostProcessor:
    """The ``"mlp"`` model of :data:`~sciml.weather.postprocess.registry.MODELS`."""
    static = len(config.static or ())
    return PostProcessor(channels, static=static, backbone="mlp", periodic=config.periodic)


def build_unet(config: PostprocessConfig, channels: int) -> PostProcessor:
    """The ``"unet"`` model of :data:`~sciml.weather.postprocess.registry.MODELS`."""
    static = len(config.static or ())
    return PostProcessor(channels, static=static, backbone="unet", periodic=config.periodic)


def gaussian_crps_loss(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """Mean Gaussian CRPS against ``batch["truth"]`` plus the model's regularisation.

    With ``batch["crps_scale"]`` (:mod:`sciml.weather.postprocess.loss_scale`) each
    channel's CRPS is divided by its scale before the mean: the CRPS relative to the raw ensemble.
    With ``batch["mask"]`` (missing values masked: :class:`~sciml.weather.dataset.EnsembleDataset`)
    the mean is over the points it marks only.
    ``model`` is a :class:`GaussianPostProcessor`, or a data-parallel wrapper of one.
    """
    mu, sigma = model(batch["members"], batch.get("static"), batch.get("lead_time"))
    inner = unwrap(model)
    if not isinstance(inner, GaussianPostProcessor):
        raise TypeError(f"expected a GaussianPostProcessor, got {type(inner).__name__}")
    score = crps_gaussian_loss(batch["truth"], mu, sigma, reduction="none")
    if "crps_scale" in batch:
        score = score / batch["crps_scale"]
    if "mask" in batch:
        mask = batch["mask"]
        mean = torch.where(mask, score, 0.0).sum() / mask.sum().clamp(min=1)
        return mean + inner.regularisation()
    return score.mean() + inner.regularisation()
