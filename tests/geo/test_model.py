"""MaskedUNet: shapes, band checks and the mask coating its output."""

from __future__ import annotations

import pytest
import torch

from sciml.geo.model import MaskedUNet


def test_masked_unet_shapes_and_mask_coating() -> None:
    model = MaskedUNet(4, base_channels=4, depth=2)
    image, mask = torch.rand(2, 4, 32, 32), torch.zeros(2, 1, 32, 32)
    mask[..., :16] = 1
    logits = model(image, mask)
    assert logits.shape == (2, 1, 32, 32)
    prob = MaskedUNet.probability(logits, mask)
    assert (prob[..., 16:] == 0).all() and (prob[..., :16] > 0).all()
    with pytest.raises(ValueError, match="expected 4 image bands"):
        model(torch.rand(2, 3, 32, 32), mask)
