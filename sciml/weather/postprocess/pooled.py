"""A member-permutation-invariant post-processor for any number of members (Höhlein et al. 2024).

:class:`PooledPostProcessor` encodes every member on its own with one shared encoder (1x1
convolutions: the member's channels, the static fields and the lead time at each grid
point), pools the encodings over the members (their mean and standard deviation, ddof=1)
and gives the pooled features, with the members' mean and spread, to a small
convolutional head that ends in the residual Gaussian head
(:func:`~sciml.weather.postprocess.models.residual_gaussian`). Pooling makes the forecast
independent of the members' order and of their number: train on ``k`` members drawn at
random per sample, apply to any ``k >= 2``. With ``periodic`` the head's convolutions wrap
around in longitude.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from sciml.weather.periodic import periodic_lon
from sciml.weather.postprocess.models import (
    GaussianPostProcessor,
    member_mean_sd,
    residual_gaussian,
    zero_last_conv,
)

if TYPE_CHECKING:
    from sciml.weather.postprocess.config import PostprocessConfig

__all__ = ["PooledPostProcessor", "build_pooled"]


class PooledPostProcessor(GaussianPostProcessor):
    """Shared per-member encoder, mean/std pooling over members, convolutional head.

    Args:
        channels: ``C``, channels per member.
        static: Static fields ``S`` given with every sample (0: none).
        lead_time: Whether the model reads the lead time.
        hidden: Width of the encoder and the head.
        periodic: Circular padding in longitude for the head's 3x3 convolutions.
    """

    def __init__(
        self,
        channels: int,
        *,
        static: int = 0,
        lead_time: bool = True,
        hidden: int = 32,
        periodic: bool = False,
    ) -> None:
        """Build the encoder and the head with a zero last layer (arguments: see the class)."""
        super().__init__(channels, static=static, lead_time=lead_time)
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"hidden must be an integer >= 1, got {hidden!r}")
        self.encoder = nn.Sequential(
            nn.Conv2d(channels + self.extra_inputs, hidden, 1),
            nn.ReLU(),
            nn.Conv2d(hidden, hidden, 1),
            nn.ReLU(),
        )
        self.head = nn.Sequential(
            nn.Conv2d(2 * hidden + 2 * channels + self.extra_inputs, hidden, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(hidden, hidden, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(hidden, 4 * channels, 1),
        )
        if periodic:
            periodic_lon(self.head)
        zero_last_conv(self.head)

    def forward(
        self, members: Tensor, static: Tensor | None = None, lead_time: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(mu, sigma)``, each ``(N, C, H, W)``, from members ``(N, k >= 2, C, H, W)``."""
        extras = self.extras(members, static, lead_time)
        n, k, _, h, w = members.shape
        context = torch.cat(extras, dim=1) if extras else members.new_zeros(n, 0, h, w)
        per_member = torch.cat([members, context[:, None].expand(n, k, *context.shape[1:])], dim=2)
        encoded = self.encoder(per_member.flatten(0, 1)).unflatten(0, (n, k))
        mean, sd = member_mean_sd(members)
        pooled = [*member_mean_sd(encoded), mean, sd, *extras]
        return residual_gaussian(mean, sd, self.head(torch.cat(pooled, dim=1)))


def build_pooled(config: PostprocessConfig, channels: int) -> PooledPostProcessor:
    """The ``"pooled"`` model of :data:`~sciml.weather.postprocess.registry.MODELS`."""
    return PooledPostProcessor(channels, static=len(config.static or ()), periodic=config.periodic)
