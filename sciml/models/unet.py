"""U-Net for 2D images and 3D volumes (Ronneberger et al. 2015; Cicek et al. 2016)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import nn

Norm = Literal["batch", "group", "none"]


def _conv(dims: int) -> type[nn.Module]:
    return {2: nn.Conv2d, 3: nn.Conv3d}[dims]


def _norm(dims: int, kind: Norm, channels: int) -> nn.Module:
    if kind == "batch":
        return {2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[dims](channels)
    if kind == "group":
        return nn.GroupNorm(min(8, channels), channels)
    return nn.Identity()


def _pool_factors(pool: int | Sequence[int], dims: int) -> tuple[int, ...]:
    """``pool`` as one factor per spatial dim, each an integer >= 1."""
    factors = (pool,) * dims if isinstance(pool, int) else tuple(pool)
    if len(factors) != dims or any(
        isinstance(f, bool) or not isinstance(f, int) or f < 1 for f in factors
    ):
        raise ValueError(
            f"UNet pool must be an integer >= 1 or {dims} of them (one per spatial dim), "
            f"got {pool!r}"
        )
    return factors


class ConvBlock(nn.Sequential):
    """Two ``conv(k=3, 'same') -> norm -> ReLU`` layers."""

    def __init__(self, dims: int, in_channels: int, out_channels: int, norm: Norm) -> None:
        """Two layers of ``dims``-D convolutions from ``in_channels`` to ``out_channels``."""
        conv = _conv(dims)
        super().__init__(
            conv(in_channels, out_channels, 3, padding=1, bias=norm == "none"),
            _norm(dims, norm, out_channels),
            nn.ReLU(inplace=True),
            conv(out_channels, out_channels, 3, padding=1, bias=norm == "none"),
            _norm(dims, norm, out_channels),
            nn.ReLU(inplace=True),
        )


class UNet(nn.Module):
    """A U-Net with ``depth`` poolings, for ``dims`` = 2 (N, C, H, W) or 3 (N, C, D, H, W).

    Args:
        in_channels: Input channels.
        out_channels: Output channels (logits; no final activation).
        dims: 2 or 3 spatial dimensions.
        base_channels: Channels of the first level; doubled at every level.
        depth: Number of poolings; every spatial size must divide by ``pool**depth``.
        norm: ``"batch"``, ``"group"`` or ``"none"``.
        upsample: ``"transpose"`` (learned 2x transposed convolution) or
            ``"interpolate"`` (nearest/trilinear interpolation then a 1x1 convolution).
        pool: Pooling (and upsampling) factor, one for every spatial dim or one per dim,
            e.g. ``(1, 2, 2)`` pools a volume's height and width but not its depth (a
            2-level vertical axis).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        dims: int = 3,
        base_channels: int = 16,
        depth: int = 3,
        norm: Norm = "batch",
        upsample: Literal["transpose", "interpolate"] = "transpose",
        pool: int | Sequence[int] = 2,
    ) -> None:
        """Check the options and build the levels (arguments: see the class)."""
        super().__init__()
        if dims not in (2, 3):
            raise ValueError(f"UNet supports dims=2 or dims=3, got dims={dims}")
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"UNet depth must be an integer >= 1, got {depth!r}")
        for name, value in (
            ("in_channels", in_channels),
            ("out_channels", out_channels),
            ("base_channels", base_channels),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"UNet {name} must be a positive integer, got {value!r}")
        if norm not in ("batch", "group", "none"):
            raise ValueError(f"UNet norm must be 'batch', 'group' or 'none', got {norm!r}")
        if upsample not in ("transpose", "interpolate"):
            raise ValueError(
                f"UNet upsample must be 'transpose' or 'interpolate', got {upsample!r}"
            )
        factors = _pool_factors(pool, dims)
        self.dims, self.depth, self.factors = dims, depth, factors
        widths = [base_channels * 2**level for level in range(depth + 1)]
        max_pool = {2: nn.MaxPool2d, 3: nn.MaxPool3d}[dims]
        self.encoder = nn.ModuleList()
        previous = in_channels
        for width in widths[:-1]:
            self.encoder.append(ConvBlock(dims, previous, width, norm))
            previous = width
        self.pool = max_pool(factors)
        self.bottleneck = ConvBlock(dims, widths[-2], widths[-1], norm)
        self.up = nn.ModuleList()
        self.decoder = nn.ModuleList()
        for level in reversed(range(depth)):
            wide, narrow = widths[level + 1], widths[level]
            if upsample == "transpose":
                transpose: Callable[..., nn.Module] = {
                    2: nn.ConvTranspose2d,
                    3: nn.ConvTranspose3d,
                }[dims]
                self.up.append(transpose(wide, narrow, factors, stride=factors))
            else:
                mode = "bilinear" if dims == 2 else "trilinear"
                self.up.append(
                    nn.Sequential(
                        nn.Upsample(
                            scale_factor=tuple(float(f) for f in factors),
                            mode=mode,
                            align_corners=False,
                        ),
                        _conv(dims)(wide, narrow, 1),
                    )
                )
            self.decoder.append(ConvBlock(dims, 2 * narrow, narrow, norm))
        self.head = _conv(dims)(widths[0], out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, out_channels, spatial...)`` of ``x`` ``(N, in_channels, spatial...)``."""
        if x.dim() != self.dims + 2:
            raise ValueError(
                f"UNet(dims={self.dims}) expects a {self.dims + 2}-D tensor (N, C, spatial...), "
                f"got shape {tuple(x.shape)}"
            )
        multiple = tuple(f**self.depth for f in self.factors)
        # a spatially parallel copy (sciml parallelize swaps the pooling) sees its block,
        # which need not divide: the global volume does, and the layers check that
        local = type(self.pool) in (nn.MaxPool2d, nn.MaxPool3d)
        if local and any(size % m for size, m in zip(x.shape[2:], multiple, strict=True)):
            raise ValueError(
                f"UNet(depth={self.depth}) needs spatial sizes divisible by "
                f"{', '.join(map(str, multiple))} (pool**depth per dim), got {tuple(x.shape[2:])}"
            )
        skips = []
        for block in self.encoder:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for up, block, skip in zip(self.up, self.decoder, reversed(skips), strict=True):
            x = up(x)
            x = block(torch.cat([x, skip], dim=1))
        return self.head(x)
