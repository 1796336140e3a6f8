"""The mixed model of Grönquist et al. (2021): a U-Net, then a locally connected output layer.

:class:`MixedPostProcessor` reads the members' mean and standard deviation of every
channel, the static fields and the lead time; a 2-D :class:`sciml.models.UNet` over
(lat, lon) turns them into ``features`` channels, and a
:class:`~sciml.weather.postprocess.locally_connected.LocallyConnected2d` layer (zero-initialised,
its own weights at every grid point) maps those to the ``4C`` outputs of the residual head
(:func:`~sciml.weather.postprocess.models.residual_gaussian`): the mean correction and the spread.
The training loss adds ``smoothness`` times the layer's neighbour penalty to the Gaussian
CRPS (:meth:`MixedPostProcessor.regularisation`).

The paper's U-Net runs over (level, lat, lon). Here levels x variables are channels of a
2-D U-Net: with a handful of levels (two in the toy) a convolution or pooling along
``level`` has nothing to slide over, while channels let every filter couple all levels and
variables at once (the QG model's baroclinic mode is a difference between the levels).
With ``periodic`` the convolutions wrap around in longitude (circular padding) and pad
latitude with zeros.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from sciml.models import UNet
from sciml.weather.periodic import periodic_lon
from sciml.weather.postprocess.locally_connected import LocallyConnected2d
from sciml.weather.postprocess.models import (
    GaussianPostProcessor,
    member_mean_sd,
    residual_gaussian,
)

if TYPE_CHECKING:
    from sciml.weather.postprocess.config import PostprocessConfig

__all__ = ["MixedPostProcessor", "build_mixed"]


class MixedPostProcessor(GaussianPostProcessor):
    """U-Net over (lat, lon) and a per-grid-point output layer, on one fixed grid.

    Args:
        channels: ``C``, channels per member.
        height: Latitudes of the grid (the locally connected layer is per point).
        width: Longitudes of the grid.
        static: Static fields ``S`` given with every sample (0: none).
        lead_time: Whether the model reads the lead time.
        features: Channels from the U-Net into the locally connected layer.
        base_channels: Channels of the U-Net's first level.
        depth: Poolings of the U-Net (the grid must divide by ``2**depth``).
        periodic: Longitude wraps around (convolutions and the smoothness penalty).
        smoothness: Weight of the neighbour penalty in the training loss (>= 0).
    """

    def __init__(
        self,
        channels: int,
        *,
        height: int,
        width: int,
        static: int = 0,
        lead_time: bool = True,
        features: int = 16,
        base_channels: int = 16,
        depth: int = 2,
        periodic: bool = False,
        smoothness: float = 1.0,
    ) -> None:
        """Build the U-Net and the zero locally connected layer (arguments: see the class)."""
        super().__init__(channels, static=static, lead_time=lead_time)
        if not smoothness >= 0 or smoothness == float("inf"):
            raise ValueError(f"smoothness must be a finite number >= 0, got {smoothness!r}")
        self.smoothness = float(smoothness)
        self.unet = UNet(
            2 * channels + self.extra_inputs,
            features,
            dims=2,
            base_channels=base_channels,
            depth=depth,
        )
        if periodic:
            periodic_lon(self.unet)
        self.local = LocallyConnected2d(features, 4 * channels, height, width, periodic=periodic)

    def forward(
        self, members: Tensor, static: Tensor | None = None, lead_time: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(mu, sigma)``, each ``(N, C, H, W)``, from members ``(N, k, C, H, W)``."""
        extras = self.extras(members, static, lead_time)
        mean, sd = member_mean_sd(members)
        out = self.local(self.unet(torch.cat([mean, sd, *extras], dim=1)))
        return residual_gaussian(mean, sd, out)

    def regularisation(self) -> Tensor:
        """``smoothness`` times the locally connected layer's neighbour penalty."""
        return self.smoothness * self.local.smoothness()


def build_mixed(config: PostprocessConfig, channels: int) -> MixedPostProcessor:
    """The ``"mixed"`` model of :data:`~sciml.weather.postprocess.registry.MODELS`.

    Its locally connected layer is sized to the run's grid (``config.grid``).
    """
    height, width = config.grid
    return MixedPostProcessor(
        channels,
        height=height,
        width=width,
        static=len(config.static or ()),
        periodic=config.periodic,
    )
