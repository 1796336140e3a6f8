"""Spatially parallel 3D convolution."""

from __future__ import annotations

import torch
from torch import nn

from sciml.spatial_parallel.halo.autograd import add_into, halo_finish, halo_start
from sciml.spatial_parallel.halo.overlap import additive_overlap
from sciml.spatial_parallel.halo.plan import HaloPlan
from sciml.spatial_parallel.layers.base import autocast_dtype
from sciml.spatial_parallel.layers.kernel import ConvGeometry, convolution
from sciml.spatial_parallel.layers.window import WindowLayer
from sciml.spatial_parallel.partition import Boundary, Window, same_padding


def native_only(native: tuple[int, int, int], axes: tuple[int, ...]) -> tuple[int, int, int]:
    """The operator's own padding on the axes not assembled explicitly, zero on the others."""
    return tuple(0 if k + 2 in axes else p for k, p in enumerate(native))  # type: ignore[return-value]


_BOUNDARIES: dict[str, Boundary] = {
    "zeros": "fill",
    "reflect": "reflect",
    "replicate": "replicate",
    "circular": "circular",
}


class SpatialConv3d(WindowLayer, nn.Conv3d):
    """:class:`torch.nn.Conv3d` on a spatially split volume.

    Any kernel, stride, dilation, padding and padding mode, groups and bias.
    """

    def _windows(self) -> tuple[Window, Window, Window]:
        windows = []
        for k in range(3):
            kernel, dilation = self.kernel_size[k], self.dilation[k]
            if self.padding == "same":
                lo, hi = same_padding(kernel, dilation)
            elif self.padding == "valid":
                lo = hi = 0
            else:
                lo = hi = int(self.padding[k])
            windows.append(Window(kernel, self.stride[k], dilation, lo, hi))
        return tuple(windows)  # type: ignore[return-value]

    def _boundary(self) -> Boundary:
        return _BOUNDARIES[self.padding_mode]

    def _geometry(self, padding: tuple[int, int, int]) -> ConvGeometry:
        return ConvGeometry(
            tuple(self.weight.shape),
            self.stride,  # type: ignore[arg-type]
            padding,
            self.dilation,  # type: ignore[arg-type]
            self.groups,
        )

    def _conv(
        self, x: torch.Tensor, bias: torch.Tensor | None, padding: tuple[int, int, int]
    ) -> torch.Tensor:
        """The local convolution, on the CPU kernel the unsplit layer gets (:mod:`.kernel`)."""
        return convolution(x, self.weight, bias, self._geometry(padding), unsplit=self._unsplit)

    def _op(self, x: torch.Tensor, padding: tuple[int, int, int]) -> torch.Tensor:
        return self._conv(x, self.bias, padding)

    def _additive(self, halo: HaloPlan) -> bool:
        """Whether the convolution is additive in the halos.

        It is with stride 1 and symmetric 'same' zero padding on every split axis (depth
        unsplit): the local convolution with zero padding is then the output block up to
        the halo terms.
        """
        windows = self._windows()
        if autocast_dtype(self.weight) is not None:
            # the halo corrections would round the output block twice in the lower dtype
            return False
        if 2 in halo.axes:
            # oneDNN's CPU convolution is much slower (about 1.7x here, forward+backward) with
            # zero padding along depth: a depth split computes its interior unpadded instead.
            return False
        return self.padding_mode == "zeros" and all(
            windows[axis - 2].stride == 1
            and windows[axis - 2].pad_lo == windows[axis - 2].pad_hi
            and plan.out_size == plan.size
            for axis, plan in zip(halo.axes, halo.plans, strict=True)
        )

    def _overlapped(
        self, x: torch.Tensor, halo: HaloPlan, native: tuple[int, int, int]
    ) -> torch.Tensor:
        """Convolve the block with zero halos while they travel, then add the halos' share.

        By linearity, the convolution of the received halos is added to the boundary
        shell.
        """
        if not self._additive(halo):
            return super()._overlapped(x, halo, native)
        windows = self._windows()
        padding = tuple(windows[k].pad_lo if k + 2 in halo.axes else native[k] for k in range(3))
        alias, token, exchange = halo_start(x, halo)
        out = self._conv(alias, self.bias, padding)  # type: ignore[arg-type]
        geometry = additive_overlap([windows[a - 2] for a in halo.axes], halo.plans, halo.coords)
        inputs = halo_finish(token, exchange, list(geometry.shell_inputs), halo_only=True)
        if not inputs:
            return out
        halo_padding = native_only(native, halo.axes)
        corrections = [self._conv(inp, None, halo_padding) for inp in inputs]
        return add_into(out, halo.axes, list(geometry.shells), corrections)

    def _channels(self, x: torch.Tensor) -> int:
        return self.out_channels
