"""Segmentation losses over the valid pixels only, and the loss function for ``fit``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from sciml.geo.config import LOSS_KINDS, LossKind

__all__ = ["LOSS_KINDS", "LossKind", "make_loss_fn", "masked_loss"]


def masked_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    valid: torch.Tensor,
    *,
    kind: LossKind = "bce",
    alpha: float = 0.3,
    beta: float = 0.7,
    smooth: float = 1.0,
) -> torch.Tensor:
    """Segmentation loss over the ``valid`` pixels only.

    Args:
        logits: ``(N, 1, H, W)`` logits.
        target: ``(N, 1, H, W)`` 0/1 labels.
        valid: ``(N, 1, H, W)`` 1 where the pixel counts (inside the mask, labelled).
        kind: ``"bce"`` (mean over valid pixels), ``"dice"``, ``"tversky"`` or ``"bce+dice"``.
        alpha: Tversky weight of false positives.
        beta: Tversky weight of false negatives.
        smooth: Additive smoothing of the Dice/Tversky ratio.
    """
    valid = valid.to(logits.dtype)
    count = valid.sum().clamp_min(1.0)
    if kind in ("bce", "bce+dice"):
        bce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
        bce = (bce * valid).sum() / count
        if kind == "bce":
            return bce
    prob = torch.sigmoid(logits) * valid
    target = target * valid
    tp = (prob * target).sum()
    fp = (prob * (1 - target)).sum()
    fn = ((1 - prob) * target).sum()
    if kind == "tversky":
        return 1 - (tp + smooth) / (tp + alpha * fp + beta * fn + smooth)
    dice = 1 - (2 * tp + smooth) / (2 * tp + fp + fn + smooth)
    if kind == "dice":
        return dice
    if kind == "bce+dice":
        return bce + dice
    raise ValueError(f"unknown loss kind {kind!r}; expected bce, dice, tversky or bce+dice")


def make_loss_fn(
    *, kind: LossKind = "bce", masked: bool = True
) -> Callable[[nn.Module, dict[str, Any]], dict[str, torch.Tensor]]:
    """A ``loss_fn(model, batch)`` for :func:`sciml.training.fit` on scene tiles' batches.

    The batches are those of :class:`~sciml.geo.tiles.SceneTiles`.

    ``masked=True`` feeds the mask and counts only valid pixels; ``masked=False``
    is the baseline that ignores the mask (input mask of ones, every pixel counts,
    unlabelled pixels are background).
    """

    def loss_fn(model: nn.Module, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        image, target = batch["image"], batch["label"]
        if masked:
            mask, valid = batch["mask"], batch["valid"]
        else:
            mask = valid = torch.ones_like(batch["mask"])
        logits = model(image, mask)
        loss = masked_loss(logits, target, valid, kind=kind)
        with torch.no_grad():
            pred = logits > 0
            keep = valid > 0
            accuracy = (pred == (target > 0.5))[keep].float().mean()
        return {"loss": loss, "accuracy": accuracy}

    return loss_fn
