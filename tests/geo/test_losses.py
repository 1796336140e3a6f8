"""Masked losses against closed forms."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from sciml.geo.losses import masked_loss


def test_masked_losses_against_closed_forms() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 1, 8, 8)
    target = (torch.rand(2, 1, 8, 8) > 0.5).float()
    valid = (torch.rand(2, 1, 8, 8) > 0.3).float()
    keep = valid.bool()
    bce = F.binary_cross_entropy_with_logits(logits[keep], target[keep])
    torch.testing.assert_close(masked_loss(logits, target, valid), bce)
    p, t = torch.sigmoid(logits[keep]), target[keep]
    tp, fp, fn = (p * t).sum(), (p * (1 - t)).sum(), ((1 - p) * t).sum()
    dice = 1 - (2 * tp + 1) / (2 * tp + fp + fn + 1)
    torch.testing.assert_close(masked_loss(logits, target, valid, kind="dice"), dice)
    tversky = 1 - (tp + 1) / (tp + 0.3 * fp + 0.7 * fn + 1)
    torch.testing.assert_close(masked_loss(logits, target, valid, kind="tversky"), tversky)
    # pixels outside the mask do not change the loss or get gradients
    logits.requires_grad_(True)
    masked_loss(logits, target, valid, kind="bce+dice").backward()
    assert (logits.grad[~keep] == 0).all() and (logits.grad[keep] != 0).any()
    with pytest.raises(ValueError, match="unknown loss kind"):
        masked_loss(logits, target, valid, kind="focal")
