"""Spatially parallel 3D max and average pooling."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sciml.spatial_parallel.constants import constant
from sciml.spatial_parallel.layers.base import triple
from sciml.spatial_parallel.layers.window import WindowLayer
from sciml.spatial_parallel.partition import DimPlan, Window


class SpatialMaxPool3d(WindowLayer, nn.MaxPool3d):
    """:class:`torch.nn.MaxPool3d` on a spatially split volume.

    Any kernel, stride, padding, dilation and ``ceil_mode``.
    """

    fill_value = -math.inf

    def _check(self) -> None:
        if self.return_indices:
            raise ValueError(
                f"{self._label()}: return_indices=True is not supported on a split volume"
            )
        for w in self._windows():
            if 2 * w.pad_lo > w.reach:
                raise ValueError(
                    f"{self._label()}: padding={self.padding} is more than half the effective "
                    f"kernel size {w.reach} (kernel_size={self.kernel_size}, "
                    f"dilation={self.dilation}); torch.nn.MaxPool3d rejects it too"
                )

    def _windows(self) -> tuple[Window, Window, Window]:
        kernel, dilation, padding = (
            triple(v) for v in (self.kernel_size, self.dilation, self.padding)
        )
        stride = triple(self.stride if self.stride else self.kernel_size)
        return tuple(  # type: ignore[return-value]
            Window(kernel[k], stride[k], dilation[k], padding[k], padding[k], self.ceil_mode)
            for k in range(3)
        )

    def _op(self, x: torch.Tensor, padding: tuple[int, int, int]) -> torch.Tensor:
        windows = self._windows()
        return F.max_pool3d(
            x,
            [w.kernel for w in windows],
            [w.stride for w in windows],
            padding,
            [w.dilation for w in windows],
            ceil_mode=self.ceil_mode,
        )


class SpatialAvgPool3d(WindowLayer, nn.AvgPool3d):
    """:class:`torch.nn.AvgPool3d` on a spatially split volume.

    Any kernel, stride, padding, ``ceil_mode``, ``count_include_pad`` and
    ``divisor_override``.
    """

    def _check(self) -> None:
        for w in self._windows():
            if 2 * w.pad_lo > w.kernel:
                raise ValueError(
                    f"{self._label()}: padding={self.padding} is more than half the kernel "
                    f"size {self.kernel_size}; torch.nn.AvgPool3d rejects it too"
                )

    def _windows(self) -> tuple[Window, Window, Window]:
        kernel, padding = triple(self.kernel_size), triple(self.padding)
        stride = triple(self.stride if self.stride else self.kernel_size)
        return tuple(  # type: ignore[return-value]
            Window(kernel[k], stride[k], 1, padding[k], padding[k], self.ceil_mode)
            for k in range(3)
        )

    def _op(self, x: torch.Tensor, padding: tuple[int, int, int]) -> torch.Tensor:
        windows = self._windows()
        return F.avg_pool3d(
            x,
            [w.kernel for w in windows],
            [w.stride for w in windows],
            padding,
            ceil_mode=self.ceil_mode,
            count_include_pad=self.count_include_pad,
            divisor_override=self.divisor_override,
        )

    def _post(
        self, y: torch.Tensor, plans: dict[int, DimPlan], ranges: dict[int, tuple[int, int]]
    ) -> torch.Tensor:
        """Rescale windows that reach into padding: the operator divided by the full kernel."""
        if self.divisor_override:
            return y
        windows = self._windows()
        for axis, (o0, o1) in ranges.items():
            w, size = windows[axis - 2], plans[axis].size
            start = np.arange(o0, o1) * w.stride - w.pad_lo
            end = np.minimum(start + w.kernel, size + w.pad_hi)
            if not self.count_include_pad:
                start, end = np.maximum(start, 0), np.minimum(end, size)
            count = end - start
            if np.all(count == w.kernel):
                continue
            shape = [1] * 5
            shape[axis] = o1 - o0
            factor = constant(w.kernel / count, dtype=y.dtype, device=y.device).reshape(shape)
            y = y * factor
        return y
