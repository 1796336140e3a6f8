"""Spatially parallel 3D transposed convolution."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sciml.spatial_parallel.halo.autograd import halo_extend
from sciml.spatial_parallel.halo.plan import HaloPlan, build_halo_plan
from sciml.spatial_parallel.layers.base import SpatialLayer
from sciml.spatial_parallel.layers.kernel import ConvGeometry, convolution
from sciml.spatial_parallel.partition import DIM_NAMES, TransposeWindow, block_bounds, plan_dim


class SpatialConvTranspose3d(SpatialLayer, nn.ConvTranspose3d):
    """:class:`torch.nn.ConvTranspose3d` on a spatially split volume.

    Any kernel, stride, padding, ``output_padding``, dilation, groups and bias.
    """

    def _check(self) -> None:
        if self.padding_mode != "zeros":
            raise ValueError(f"{self._label()}: only padding_mode='zeros' is supported")
        for k in range(3):
            w = self._window(k)
            if w.output_padding >= max(w.stride, w.dilation):
                raise ValueError(
                    f"{self._label()}: output_padding={self.output_padding} must be smaller "
                    f"than the stride {self.stride} or the dilation {self.dilation} along "
                    f"every axis; torch.nn.ConvTranspose3d rejects it too"
                )

    def _plan(self, shape: tuple[int, int, int]) -> HaloPlan:
        if shape not in self._plans:
            axes, plans = [], []
            for k, (size, parts) in enumerate(zip(shape, self.mesh.grid, strict=True)):
                if parts == 1:
                    continue
                window = self._window(k)
                out = window.output_size(size)
                needs = [window.input_range(lo, hi, size) for lo, hi in block_bounds(out, parts)]
                axes.append(k + 2)
                plans.append(
                    plan_dim(size, parts, out, needs, layer=self._label(), dim=DIM_NAMES[k])
                )
            self._plans[shape] = build_halo_plan(self.mesh, tuple(axes), tuple(plans))
        return self._plans[shape]

    def _window(self, k: int) -> TransposeWindow:
        return TransposeWindow(
            self.kernel_size[k],
            self.stride[k],
            self.dilation[k],
            int(self.padding[k]),
            self.output_padding[k],
        )

    def forward(self, x: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        """Transposed convolution of this rank's block (``output_size`` is not supported)."""
        if output_size is not None:
            raise ValueError(f"{self._label()}: output_size= is not supported on a split volume")
        self._check_input(x)
        shape = self._global_shape(x)
        halo = self._plan(shape)
        padding = [int(p) for p in self.padding]
        output_padding = [int(p) for p in self.output_padding]
        for axis in halo.axes:
            padding[axis - 2] = output_padding[axis - 2] = 0
        x_ext = halo_extend(x, halo) if halo.axes else x
        out_shape = list(x.shape)
        out_shape[1] = self.out_channels
        for k in range(3):
            out_shape[k + 2] = self._window(k).output_size(x.shape[k + 2])
        for axis, plan, coord in zip(halo.axes, halo.plans, halo.coords, strict=True):
            lo, hi = plan.out_blocks[coord]
            out_shape[axis] = hi - lo
        if 0 in x_ext.shape[2:]:
            y = x_ext.sum() + x_ext.new_zeros(out_shape)  # keeps the exchange in the graph
        else:
            geometry = ConvGeometry(
                tuple(self.weight.shape),
                self.stride,  # type: ignore[arg-type]
                tuple(padding),  # type: ignore[arg-type]
                self.dilation,  # type: ignore[arg-type]
                self.groups,
                transposed=True,
                output_padding=tuple(output_padding),  # type: ignore[arg-type]
            )
            # on the CPU kernel the unsplit layer gets
            unsplit = (x.shape[0], x.shape[1], *shape)
            y = convolution(x_ext, self.weight, None, geometry, unsplit=unsplit)
            for axis, plan, coord in zip(halo.axes, halo.plans, halo.coords, strict=True):
                window = self._window(axis - 2)
                origin = plan.needs[coord][0] * window.stride - window.padding
                start = plan.out_blocks[coord][0] - origin
                stop = plan.out_blocks[coord][1] - origin
                front, back = max(0, -start), max(0, stop - y.shape[axis])
                if front or back:
                    pad = [0, 0] * (4 - axis) + [front, back]
                    y = F.pad(y, pad)
                y = y.narrow(axis, start + front, stop - start)
        if self.bias is not None:  # in the operator's dtype (autocast's lower one)
            y = (y + self.bias.view(1, -1, 1, 1, 1)).to(y.dtype)
        return y
