"""Convolutions that wrap around in longitude (a global or zonally periodic grid).

:func:`periodic_lon` turns every padded ``Conv2d`` of a module into a
:class:`LonPeriodicConv2d`: the last dim (longitude) is padded circularly, the one before
(latitude) with zeros, so a filter at the dateline sees the other side of the globe and
one at the pole (or a channel wall) sees nothing beyond it. :func:`is_periodic_lon` says
whether a grid's longitudes close the circle.
"""

from __future__ import annotations

import numpy as np
import torch.nn.functional as F
import xarray as xr
from torch import Tensor, nn

__all__ = ["LonPeriodicConv2d", "is_periodic_lon", "periodic_lon"]


class LonPeriodicConv2d(nn.Conv2d):
    """``Conv2d`` with circular padding along the last dim and zero padding along the other."""

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        pad_lat, pad_lon = (int(p) for p in self.padding)
        padded = F.pad(input, (pad_lon, pad_lon, 0, 0), mode="circular")
        padded = F.pad(padded, (0, 0, pad_lat, pad_lat))
        return F.conv2d(padded, weight, bias, self.stride, 0, self.dilation, self.groups)


def _periodic_copy(conv: nn.Conv2d) -> LonPeriodicConv2d:
    if isinstance(conv.padding, str) or conv.padding_mode != "zeros":
        raise ValueError(
            f"periodic_lon needs numeric zero padding, got padding={conv.padding!r}, "
            f"padding_mode={conv.padding_mode!r}"
        )
    new = LonPeriodicConv2d(
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
            setattr(module, name, _periodic_copy(child))
        else:
            periodic_lon(child)
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
