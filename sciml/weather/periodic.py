"""Convolutions that wrap around in longitude (a global or zonally periodic grid).

:func:`periodic_lon` turns every padded ``Conv2d`` of a module into a
:class:`LonPeriodicConv2d`: the last dim (longitude) is padded circularly, the one before
(latitude) with zeros, so a filter at the dateline sees the other side of the globe and
one at the pole (or a channel wall) sees nothing beyond it. :func:`periodic_conv3d` is the
3-D counterpart for volumes ``(N, C, D, H, W)``: every padded ``Conv3d`` becomes a
:class:`PeriodicConv3d` that pads the chosen dims circularly and the others with zeros (the
spread U-Net over (level, lat, lon) wraps lon, and lat on a doubly periodic domain).
:func:`is_periodic_lon` says whether a grid's longitudes close the circle.

With every convolution periodic, a U-Net whose wrapped sizes divide by ``pool**depth`` (its
poolings and ``kernel == stride`` transposed convolutions tile the period without padding)
is exactly periodic: it commutes with a roll of its input by any multiple of
``pool**depth`` points along a wrapped dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import torch.nn.functional as F
import xarray as xr
from torch import Tensor, nn

__all__ = [
    "LonPeriodicConv2d",
    "PeriodicConv3d",
    "is_periodic_lon",
    "periodic_conv3d",
    "periodic_lon",
]


class LonPeriodicConv2d(nn.Conv2d):
    """``Conv2d`` with circular padding along the last dim and zero padding along the other."""

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        pad_lat, pad_lon = (int(p) for p in self.padding)
        padded = F.pad(input, (pad_lon, pad_lon, 0, 0), mode="circular")
        padded = F.pad(padded, (0, 0, pad_lat, pad_lat))
        return F.conv2d(padded, weight, bias, self.stride, 0, self.dilation, self.groups)


class PeriodicConv3d(nn.Conv3d):
    """``Conv3d`` with circular padding along the dims in ``wrap`` and zero padding elsewhere.

    ``wrap`` holds spatial dim indices of ``(D, H, W)``: 0, 1, 2 (set by
    :func:`periodic_conv3d`; empty: an ordinary zero-padded convolution).
    """

    wrap: tuple[int, ...] = ()

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        circular: list[int] = []
        zeros: list[int] = []
        for dim in reversed(range(3)):  # F.pad lists the last dim first
            p = int(self.padding[dim])
            circular += [p, p] if dim in self.wrap else [0, 0]
            zeros += [0, 0] if dim in self.wrap else [p, p]
        padded = F.pad(input, circular, mode="circular") if any(circular) else input
        padded = F.pad(padded, zeros)
        return F.conv3d(padded, weight, bias, self.stride, 0, self.dilation, self.groups)


ConvT = TypeVar("ConvT", LonPeriodicConv2d, PeriodicConv3d)


def _check_padding(conv: nn.Conv2d | nn.Conv3d, caller: str) -> None:
    if isinstance(conv.padding, str) or conv.padding_mode != "zeros":
        raise ValueError(
            f"{caller} needs numeric zero padding, got padding={conv.padding!r}, "
            f"padding_mode={conv.padding_mode!r}"
        )


def _periodic_copy(conv: nn.Conv2d | nn.Conv3d, kind: type[ConvT]) -> ConvT:
    new = kind(
        conv.in_channels,
        conv.out_channels,
        conv.kernel_size,  # type: ignore[arg-type]
        stride=conv.stride,  # type: ignore[arg-type]
        padding=conv.padding,  # type: ignore[arg-type]
        dilation=conv.dilation,  # type: ignore[arg-type]
        groups=conv.groups,
        bias=conv.bias is not None,
    )
    new.to(device=conv.weight.device, dtype=conv.weight.dtype).load_state_dict(conv.state_dict())
    return new


def periodic_lon(module: nn.Module) -> nn.Module:
    """Replace, in place, every padded ``Conv2d`` of ``module`` by a periodic copy; return it."""
    for name, child in module.named_children():
        if type(child) is nn.Conv2d and child.padding not in ("valid", (0, 0)):
            _check_padding(child, "periodic_lon")
            setattr(module, name, _periodic_copy(child, LonPeriodicConv2d))
        else:
            periodic_lon(child)
    return module


def periodic_conv3d(module: nn.Module, *, wrap: Sequence[int]) -> nn.Module:
    """Replace, in place, every padded ``Conv3d`` by a :class:`PeriodicConv3d`; return it.

    Args:
        module: Any module (its ``Conv3d`` children at any depth are replaced).
        wrap: Spatial dims of ``(D, H, W)`` that wrap around: indices 0, 1, 2.

    Raises:
        ValueError: ``wrap`` holds other indices, or a convolution pads by a string
            (``"same"``) or in a mode other than zeros.
    """
    if any(isinstance(d, bool) or d not in (0, 1, 2) for d in wrap):
        raise ValueError(f"wrap must hold spatial dims 0, 1, 2 of (D, H, W), got {list(wrap)}")
    dims = tuple(sorted(set(wrap)))
    for name, child in module.named_children():
        if type(child) is nn.Conv3d and child.padding not in ("valid", (0, 0, 0)):
            _check_padding(child, "periodic_conv3d")
            new = _periodic_copy(child, PeriodicConv3d)
            new.wrap = dims
            setattr(module, name, new)
        else:
            periodic_conv3d(child, wrap=dims)
    return module


def is_periodic_lon(ds: xr.Dataset | xr.DataArray, *, dim: str = "lon") -> bool:
    """Whether ``dim`` holds at least 3 evenly spaced longitudes (degrees) closing 360."""
    if dim not in ds.coords or ds[dim].ndim != 1 or ds.sizes[dim] < 3:
        return False
    lon = np.asarray(ds[dim].values, dtype=np.float64)
    step = np.diff(lon)
    if not np.allclose(step, step[0], rtol=1e-6) or step[0] == 0:
        return False
    return bool(np.isclose(abs(step[0]) * lon.size, 360.0, rtol=1e-6))
