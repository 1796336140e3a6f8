"""CosmoFlow: regress cosmological parameters from 3D dark-matter volumes.

Mathuriya et al. (SC18) and the MLPerf HPC reference: a stack of
``Conv3d(k=3) -> LeakyReLU -> MaxPool3d(2)`` blocks, then a dense head. Here
the head starts from a global average pool (``head="pool"``, the default,
which a spatially split volume reduces exactly) or from the flattened last
feature map (``head="flatten"``, as in the MLPerf reference, which needs the
input size). The MLPerf reference scales the ``tanh`` output by 1.2
(``output_scale=1.2``) so that targets in [-1, 1] are not at its asymptotes.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn


class CosmoFlow(nn.Module):
    """CosmoFlow network for (N, C, D, H, W) volumes.

    Args:
        in_channels: Input channels (4 redshift slices in the MLPerf data).
        out_features: Regressed parameters (4 in the MLPerf data).
        base_filters: Filters of the first convolution; doubled per block up to 256.
        n_conv: Number of convolution + pooling blocks.
        dense: Widths of the hidden dense layers.
        head: ``"pool"`` (global average pool) or ``"flatten"``.
        input_size: Cubic input edge; required for ``head="flatten"``.
        batch_norm: Add BatchNorm3d after each convolution.
        dropout: Dropout probability in the dense head.
        output_scale: Factor of the final ``tanh`` (1.2 in the MLPerf reference).
    """

    def __init__(
        self,
        in_channels: int = 4,
        out_features: int = 4,
        *,
        base_filters: int = 32,
        n_conv: int = 5,
        dense: tuple[int, ...] = (128, 64),
        head: Literal["pool", "flatten"] = "pool",
        input_size: int | None = None,
        batch_norm: bool = False,
        dropout: float = 0.0,
        output_scale: float = 1.0,
    ) -> None:
        """Check the options and build the layers (arguments: see the class)."""
        super().__init__()
        for name, value in (
            ("in_channels", in_channels),
            ("out_features", out_features),
            ("base_filters", base_filters),
            *((f"dense[{i}]", width) for i, width in enumerate(dense)),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"CosmoFlow {name} must be a positive integer, got {value!r}")
        if not isinstance(n_conv, int) or n_conv < 0:
            raise ValueError(f"CosmoFlow n_conv must be an integer >= 0, got {n_conv!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"CosmoFlow dropout must be in [0, 1), got {dropout!r}")
        if not (isinstance(output_scale, int | float) and 0 < output_scale < float("inf")):
            raise ValueError(f"CosmoFlow output_scale must be > 0, got {output_scale!r}")
        self.output_scale = float(output_scale)
        layers: list[nn.Module] = []
        channels = in_channels
        for block in range(n_conv):
            width = min(base_filters * 2**block, 256)
            layers.append(nn.Conv3d(channels, width, 3, padding=1, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm3d(width))
            layers += [nn.LeakyReLU(0.3), nn.MaxPool3d(2)]
            channels = width
        self.features = nn.Sequential(*layers)
        if head == "pool":
            self.pool: nn.Module = nn.AdaptiveAvgPool3d(1)
            flat = channels
        elif head == "flatten":
            if input_size is None or input_size < 1 or input_size % 2**n_conv:
                raise ValueError(
                    f"CosmoFlow(head='flatten') needs input_size divisible by 2**n_conv="
                    f"{2**n_conv}, got input_size={input_size}"
                )
            self.pool = nn.Identity()
            flat = channels * (input_size // 2**n_conv) ** 3
        else:
            raise ValueError(f"head must be 'pool' or 'flatten', got {head!r}")
        mlp: list[nn.Module] = [nn.Flatten()]
        for width in dense:
            mlp += [nn.Linear(flat, width), nn.LeakyReLU(0.3)]
            if dropout:
                mlp.append(nn.Dropout(dropout))
            flat = width
        mlp += [nn.Linear(flat, out_features), nn.Tanh()]
        self.head = nn.Sequential(*mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Regressed parameters ``(N, out_features)`` of the volumes ``x`` ``(N, C, D, H, W)``."""
        if x.dim() != 5:
            raise ValueError(f"CosmoFlow expects an (N, C, D, H, W) tensor, got {tuple(x.shape)}")
        out = self.head(self.pool(self.features(x)))
        return out * self.output_scale if self.output_scale != 1.0 else out
