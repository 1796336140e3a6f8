"""Masked tree segmentation: a 2D U-Net with a mask channel.

The mask (where the inventory is complete) is an input channel and coats the
image and the output; losses (:mod:`sciml.geo.losses`) and metrics
(:mod:`sciml.geo.scores`) count only inside it, and training runs live in
:mod:`sciml.geo.training`. At inference the mask can be all ones to map trees
everywhere.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn

from sciml.models import UNet

__all__ = ["MaskedUNet"]


class MaskedUNet(nn.Module):
    """2D U-Net on ``[image * mask, mask]`` whose output is meant to be coated by the mask.

    Args:
        in_channels: Image bands (3 for RGB, 4 for RGB+NIR); the mask adds one.
        base_channels: Channels of the U-Net's first level; doubled at every level.
        depth: Number of 2x poolings; tile sides must divide by ``2**depth``.
        norm: ``"batch"``, ``"group"`` or ``"none"`` (see :class:`sciml.models.UNet`).
        mask_image: Multiply the image by the mask before the network.
    """

    def __init__(
        self,
        in_channels: int = 3,
        *,
        base_channels: int = 16,
        depth: int = 3,
        norm: Literal["batch", "group", "none"] = "batch",
        mask_image: bool = True,
    ) -> None:
        """Build the U-Net and record the configuration (arguments: see the class)."""
        super().__init__()
        self.in_channels, self.mask_image = in_channels, mask_image
        #: Constructor arguments, saved next to checkpoints by :func:`train_segmenter`.
        self.config: dict[str, Any] = {
            "in_channels": in_channels,
            "base_channels": base_channels,
            "depth": depth,
            "norm": norm,
            "mask_image": mask_image,
        }
        self.unet = UNet(
            in_channels + 1, 1, dims=2, base_channels=base_channels, depth=depth, norm=norm
        )

    def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, 1, H, W)`` of ``image`` ``(N, C, H, W)`` and ``mask`` ``(N, 1, H, W)``."""
        if image.shape[1] != self.in_channels:
            raise ValueError(f"expected {self.in_channels} image bands, got {image.shape[1]}")
        if self.mask_image:
            image = image * mask
        return self.unet(torch.cat([image, mask], dim=1))

    @staticmethod
    def probability(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Tree probability coated by the mask: ``sigmoid(logits) * mask``."""
        return torch.sigmoid(logits) * mask
