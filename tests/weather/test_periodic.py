"""Convolutions that wrap around in longitude and pad latitude with zeros."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import xarray as xr
from torch import nn

from sciml.models import UNet
from sciml.weather.periodic import (
    LonPeriodicConv2d,
    PeriodicConv3d,
    is_periodic_lon,
    periodic_conv3d,
    periodic_lon,
)


def test_periodic_conv_wraps_longitude_and_zero_pads_latitude() -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 3, 3, padding=1).double()
    x = torch.randn(1, 2, 5, 6, dtype=torch.float64)
    wrapped = torch.cat([x[..., -1:], x, x[..., :1]], dim=-1)
    expected = F.conv2d(F.pad(wrapped, (0, 0, 1, 1)), conv.weight, conv.bias)
    periodic = periodic_lon(nn.Sequential(conv))[0]
    assert isinstance(periodic, LonPeriodicConv2d)
    torch.testing.assert_close(periodic(x), expected, rtol=0, atol=0)


def test_a_periodic_unet_commutes_with_a_shift_in_longitude() -> None:
    torch.manual_seed(0)
    unet = periodic_lon(UNet(2, 2, dims=2, base_channels=4, depth=2, norm="none")).double()
    x = torch.randn(1, 2, 8, 16, dtype=torch.float64)
    # a shift by the coarsest cell (2**depth points) is a symmetry of the whole U-Net
    torch.testing.assert_close(unet(x.roll(4, dims=-1)), unet(x).roll(4, dims=-1))
    assert not torch.allclose(unet(x.roll(4, dims=-2)), unet(x).roll(4, dims=-2))


def test_periodic_conv3d_wraps_the_chosen_dims_and_zero_pads_the_others() -> None:
    torch.manual_seed(0)
    conv = nn.Conv3d(2, 3, 3, padding=1).double()
    x = torch.randn(1, 2, 3, 5, 6, dtype=torch.float64)
    wrapped = torch.cat([x[..., -1:], x, x[..., :1]], dim=-1)  # W wraps
    wrapped = torch.cat([wrapped[..., -1:, :], wrapped, wrapped[..., :1, :]], dim=-2)  # H
    expected = F.conv3d(F.pad(wrapped, (0, 0, 0, 0, 1, 1)), conv.weight, conv.bias)  # D: zeros
    periodic = periodic_conv3d(nn.Sequential(nn.Sequential(conv)), wrap=[2, 1])[0][0]
    assert isinstance(periodic, PeriodicConv3d) and periodic.wrap == (1, 2)
    torch.testing.assert_close(periodic(x), expected, rtol=0, atol=0)
    plain = periodic_conv3d(nn.Sequential(conv), wrap=[])[0]
    torch.testing.assert_close(plain(x), conv(x), rtol=0, atol=0)


def test_periodic_conv3d_refuses_what_it_cannot_wrap() -> None:
    with pytest.raises(ValueError, match=r"wrap must hold spatial dims 0, 1, 2 .* got \[3\]"):
        periodic_conv3d(nn.Conv3d(1, 1, 3, padding=1), wrap=[3])
    with pytest.raises(ValueError, match=r"got \['lon', 1\]"):
        periodic_conv3d(nn.Conv3d(1, 1, 3, padding=1), wrap=["lon", 1])  # type: ignore[list-item]
    same = nn.Sequential(nn.Conv3d(1, 1, 3, padding="same"))
    with pytest.raises(ValueError, match="periodic_conv3d needs numeric zero padding"):
        periodic_conv3d(same, wrap=[2])
    reflect = nn.Sequential(nn.Conv3d(1, 1, 3, padding=1, padding_mode="reflect"))
    with pytest.raises(ValueError, match="padding_mode='reflect'"):
        periodic_conv3d(reflect, wrap=[2])


def test_is_periodic_lon() -> None:
    assert is_periodic_lon(xr.Dataset(coords={"lon": np.arange(32) * 11.25}))
    assert not is_periodic_lon(xr.Dataset(coords={"lon": np.arange(30) * 0.25}))
    assert not is_periodic_lon(xr.Dataset(coords={"lon": [0.0, 10.0, 30.0]}))
    assert not is_periodic_lon(xr.Dataset(coords={"x": np.arange(32) * 11.25}))
