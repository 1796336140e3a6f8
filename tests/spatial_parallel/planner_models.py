"""Small models the planner's tests trace and price."""

from __future__ import annotations

from torch import nn


def pool_then_block(nested: bool) -> nn.Sequential:
    """A pooled volume into three layers, called as a block of their own or inline."""
    head = [nn.Conv3d(2, 8, 1), nn.MaxPool3d(2)]
    block = [nn.Conv3d(8, 1, 3, padding=1), nn.ReLU(), nn.Conv3d(1, 256, 3, padding=1)]
    return nn.Sequential(*head, nn.Sequential(*block)) if nested else nn.Sequential(*head, *block)
