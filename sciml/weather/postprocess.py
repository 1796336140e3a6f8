r"""Deep post-processing of an ensemble subset into a Gaussian forecast (ENS-10 baselines).

A :class:`PostProcessor` reads ``k >= 2`` members (``(N, k, C, H, W)``, normalised
channels) and optional static fields, forms the ensemble mean :math:`\bar x` and standard
deviation :math:`s` (ddof=1) per channel, and lets a backbone see ``[mean, sd, static]``.
The backbone's ``2C`` outputs :math:`(o_0, o_1)` enter the residual head of ENS-10
(Ashkboos et al. 2022):

.. math::
    \mu = \bar x + s\,o_0, \qquad \sigma = s\,e^{o_1} + \sigma_{min},

so the last layer, initialised to zero, starts from the raw ensemble's Gaussian.
:data:`SIGMA_MIN` (in normalised units) keeps a zero-spread point trainable.
Backbones: ``"mlp"``, the same small MLP at every grid point (1x1 convolutions); ``"unet"``,
a 2-D :class:`sciml.models.UNet` over (lat, lon). Both train on the closed-form Gaussian
CRPS (:func:`gaussian_crps_loss`).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from sciml.models import UNet
from sciml.weather.losses import crps_gaussian_loss

__all__ = ["BACKBONES", "SIGMA_MIN", "PostProcessor", "gaussian_crps_loss"]

#: Smallest forecast standard deviation, in normalised units.
SIGMA_MIN = 1e-3
BACKBONES = ("mlp", "unet")
Backbone = Literal["mlp", "unet"]


def _mlp(inputs: int, outputs: int, hidden: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(inputs, hidden, 1),
        nn.ReLU(),
        nn.Conv2d(hidden, hidden, 1),
        nn.ReLU(),
        nn.Conv2d(hidden, outputs, 1),
    )


class PostProcessor(nn.Module):
    """Members (and static fields) to the Gaussian ``(mu, sigma)`` of every channel.

    Args:
        channels: ``C``, channels per member.
        static: Static fields ``S`` given with every sample (0: none).
        backbone: ``"mlp"`` (per grid point) or ``"unet"``.
        hidden: Width of the MLP.
        base_channels: Channels of the U-Net's first level.
        depth: Poolings of the U-Net (the grid must divide by ``2**depth``).
    """

    def __init__(
        self,
        channels: int,
        *,
        static: int = 0,
        backbone: Backbone = "mlp",
        hidden: int = 32,
        base_channels: int = 16,
        depth: int = 2,
    ) -> None:
        """Build the backbone with a zero last layer (arguments: see the class)."""
        super().__init__()
        if backbone not in BACKBONES:
            raise ValueError(f"backbone must be one of {BACKBONES}, got {backbone!r}")
        for name, value in (("channels", channels), ("hidden", hidden)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(static, bool) or not isinstance(static, int) or static < 0:
            raise ValueError(f"static must be an integer >= 0, got {static!r}")
        self.channels, self.static = channels, static
        inputs, outputs = 2 * channels + static, 2 * channels
        self.backbone = (
            _mlp(inputs, outputs, hidden)
            if backbone == "mlp"
            else UNet(inputs, outputs, dims=2, base_channels=base_channels, depth=depth)
        )
        last = [m for m in self.backbone.modules() if isinstance(m, nn.Conv2d)][-1]
        nn.init.zeros_(last.weight)
        if last.bias is not None:
            nn.init.zeros_(last.bias)

    def forward(self, members: Tensor, static: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(mu, sigma)``, each ``(N, C, H, W)``, from members ``(N, k, C, H, W)``."""
        if members.ndim != 5 or members.shape[1] < 2 or members.shape[2] != self.channels:
            raise ValueError(
                f"members must be (N, k >= 2, C={self.channels}, H, W), got {tuple(members.shape)}"
            )
        if (static is None) != (self.static == 0) or (
            static is not None and static.shape[1] != self.static
        ):
            got = None if static is None else tuple(static.shape)
            raise ValueError(f"expected {self.static} static field(s) (N, S, H, W), got {got}")
        mean, sd = members.mean(1), members.std(1)
        features = [mean, sd] if static is None else [mean, sd, static]
        out = self.backbone(torch.cat(features, dim=1))
        mu = mean + sd * out[:, : self.channels]
        sigma = sd * torch.exp(out[:, self.channels :]) + SIGMA_MIN
        return mu, sigma


def gaussian_crps_loss(model: PostProcessor, batch: dict[str, Tensor]) -> Tensor:
    """Mean Gaussian CRPS of the model's forecast against ``batch["truth"]`` (for ``fit``)."""
    mu, sigma = model(batch["members"], batch.get("static"))
    return crps_gaussian_loss(batch["truth"], mu, sigma)
