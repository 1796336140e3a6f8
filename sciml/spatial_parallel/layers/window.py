"""Sliding-window layers (convolution, pooling): halo exchange, overlapped or not."""

from __future__ import annotations

from typing import ClassVar

import torch

from sciml.spatial_parallel.halo.autograd import assemble, halo_extend, halo_finish, halo_start
from sciml.spatial_parallel.halo.exchange import narrow
from sciml.spatial_parallel.halo.overlap import Box, window_overlap
from sciml.spatial_parallel.halo.plan import HaloPlan, build_halo_plan
from sciml.spatial_parallel.layers.base import SpatialLayer, empty_connected
from sciml.spatial_parallel.partition import DIM_NAMES, Boundary, DimPlan, Window, window_plan


class WindowLayer(SpatialLayer):
    """Shared machinery of sliding-window layers (convolution, max and average pooling).

    Axes split over several ranks, and axes with padding the operator cannot do
    itself, are assembled explicitly by the halo exchange; the others keep the
    operator's own padding.
    """

    #: Overlap the halo exchange with the interior (``None``: on CUDA tensors only).
    overlap: bool | None = None
    fill_value: ClassVar[float] = 0.0

    def _windows(self) -> tuple[Window, Window, Window]:
        raise NotImplementedError

    def _boundary(self) -> Boundary:
        return "fill"

    def _op(self, x: torch.Tensor, padding: tuple[int, int, int]) -> torch.Tensor:
        raise NotImplementedError

    def _post(
        self, y: torch.Tensor, plans: dict[int, DimPlan], ranges: dict[int, tuple[int, int]]
    ) -> torch.Tensor:
        return y

    def _plan(self, shape: tuple[int, int, int]) -> tuple[HaloPlan, tuple[int, int, int]]:
        if shape not in self._plans:
            windows, boundary = self._windows(), self._boundary()
            axes, plans, native = [], [], []
            for k, (window, size, parts) in enumerate(
                zip(windows, shape, self.mesh.grid, strict=True)
            ):
                explicit = parts > 1 or boundary != "fill" or window.pad_lo != window.pad_hi
                native.append(0 if explicit else window.pad_lo)
                if explicit:
                    axes.append(k + 2)
                    plans.append(
                        window_plan(
                            window,
                            size,
                            parts,
                            boundary=boundary,
                            layer=self._label(),
                            dim=DIM_NAMES[k],
                        )
                    )
            halo = build_halo_plan(self.mesh, tuple(axes), tuple(plans), fill=self.fill_value)
            self._plans[shape] = (halo, tuple(native))
        return self._plans[shape]

    def _out_shape(self, x: torch.Tensor, halo: HaloPlan) -> list[int] | None:
        """Local output shape when some axis of this rank's output block is empty, else None."""
        sizes = {
            a: p.out_blocks[c][1] - p.out_blocks[c][0]
            for a, p, c in zip(halo.axes, halo.plans, halo.coords, strict=True)
        }
        if all(sizes.values()):
            return None
        shape = [x.shape[0], self._channels(x)]
        for k, window in enumerate(self._windows()):
            axis = k + 2
            shape.append(sizes[axis] if axis in sizes else window.output_size(x.shape[axis]))
        return shape

    def _ranges(self, halo: HaloPlan, box: Box | None = None) -> dict[int, tuple[int, int]]:
        ranges = {}
        for k, (axis, plan, coord) in enumerate(
            zip(halo.axes, halo.plans, halo.coords, strict=True)
        ):
            lo, hi = plan.out_blocks[coord]
            ranges[axis] = (lo, hi) if box is None else (lo + box[k][0], lo + box[k][1])
        return ranges

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to this rank's block, exchanging the halos it reads."""
        self._check_input(x)
        shape = self._global_shape(x)
        #: This call's input as the unsplit layer would see it (the kernel it would get).
        self._unsplit = (x.shape[0], x.shape[1], *shape)
        halo, native = self._plan(shape)
        plans = dict(zip(halo.axes, halo.plans, strict=True))
        if not halo.axes:
            return self._op(x, native)
        empty = self._out_shape(x, halo)
        overlap = x.is_cuda if self.overlap is None else self.overlap
        if overlap and halo.needs_exchange and empty is None:
            return self._overlapped(x, halo, native)
        x_ext = halo_extend(x, halo)
        if empty is not None:
            return empty_connected(x_ext, empty)
        return self._post(self._op(x_ext, native), plans, self._ranges(halo))

    def _channels(self, x: torch.Tensor) -> int:
        return x.shape[1]

    def _overlapped(
        self, x: torch.Tensor, halo: HaloPlan, native: tuple[int, int, int]
    ) -> torch.Tensor:
        """Compute the interior while the halos travel, then the boundary shells.

        The interior outputs read only this rank's block; the boundary shells read the
        assembled halos; all are written into one output block.
        """
        windows = self._windows()
        plans = dict(zip(halo.axes, halo.plans, strict=True))
        geometry = window_overlap([windows[a - 2] for a in halo.axes], halo.plans, halo.coords)
        alias, token, exchange = halo_start(x, halo)
        boxes: list[Box] = []
        parts: list[torch.Tensor] = []
        if geometry.interior is not None and geometry.interior_input is not None:
            view = narrow(alias, halo.axes, geometry.interior_input)
            ranges = self._ranges(halo, geometry.interior)
            parts.append(self._post(self._op(view, native), plans, ranges))
            boxes.append(geometry.interior)
        inputs = halo_finish(token, exchange, list(geometry.shell_inputs))
        for box, inp in zip(geometry.shells, inputs, strict=True):
            parts.append(self._post(self._op(inp, native), plans, self._ranges(halo, box)))
            boxes.append(box)
        shape = list(parts[0].shape)
        for axis, (_, size) in zip(halo.axes, geometry.full, strict=True):
            shape[axis] = size
        return assemble(shape, halo.axes, boxes, parts)
