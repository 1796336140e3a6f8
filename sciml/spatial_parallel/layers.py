"""Spatially parallel versions of the 3D layers: each rank computes its output block.

Every layer is a subclass of the ``torch.nn`` layer it replaces (same
parameters, same ``state_dict`` keys) built with ``from_module``. Sliding-window
layers (convolution, pooling) assemble the input range their output block
needs with a halo exchange; with ``overlap=True`` they compute the interior of
the block while the halos travel and the boundary shell afterwards, in the
forward and in the backward pass.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sciml.spatial_parallel.halo import (
    Box,
    HaloPlan,
    build_halo_plan,
    halo_extend,
    halo_finish,
    halo_start,
)
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.partition import (
    DIM_NAMES,
    Boundary,
    DimPlan,
    TransposeWindow,
    Window,
    block_bounds,
    plan_dim,
    same_padding,
    window_plan,
)

REPLICATED_TAG = "_sciml_replicated"


def _triple(value: Any) -> tuple[int, int, int]:
    if isinstance(value, int):
        return (value, value, value)
    return tuple(int(v) for v in value)  # type: ignore[return-value]


def empty_connected(x: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """A zero-size tensor of ``shape`` that stays in ``x``'s autograd graph.

    A rank whose output block is empty must still run the backward of its
    halo exchange, which its neighbours wait for.
    """
    return x.reshape(-1)[:0].reshape(shape)


class SpatialLayer:
    """Mixin: the mesh, the layer name for messages, and the local/global bookkeeping."""

    mesh: SpatialMesh
    layer_name: str

    def _setup(self, mesh: SpatialMesh, name: str) -> None:
        self.mesh = mesh
        self.layer_name = name
        self._plans: dict[tuple[int, ...], Any] = {}

    @classmethod
    def from_module(cls, module: nn.Module, mesh: SpatialMesh, *, name: str = "") -> Any:
        """The parallel layer sharing ``module``'s parameters and buffers."""
        layer = cls.__new__(cls)
        layer.__dict__.update(module.__dict__)
        layer._setup(mesh, name or type(module).__name__)
        layer._check()
        return layer

    def _check(self) -> None:
        """Raise if the configuration cannot be split (override)."""

    def _label(self) -> str:
        return f"{self.layer_name} ({type(self).__bases__[-1].__name__})"

    def _check_input(self, x: torch.Tensor) -> None:
        if x.dim() != 5:
            raise ValueError(
                f"{self._label()}: expected a local (N, C, D, H, W) block, got shape "
                f"{tuple(x.shape)}"
            )
        if getattr(x, REPLICATED_TAG, False):
            raise ValueError(
                f"{self._label()}: received a globally pooled (replicated) tensor; spatially "
                f"split layers must come before global pooling"
            )
        weight = next(self.parameters(recurse=False), None)  # type: ignore[attr-defined]
        if weight is not None and (x.dtype, x.device) != (weight.dtype, weight.device):
            raise ValueError(
                f"{self._label()}: input block is {x.dtype} on {x.device} but the layer's "
                f"parameters are {weight.dtype} on {weight.device}"
            )

    def _global_shape(self, x: torch.Tensor) -> tuple[int, int, int]:
        shape = self.mesh.global_spatial_shape(x.shape)
        for axis, (size, parts, coord) in enumerate(
            zip(shape, self.mesh.grid, self.mesh.spatial_coords, strict=True)
        ):
            expected = size // parts + (coord < size % parts)
            if x.shape[2 + axis] != expected:
                raise ValueError(
                    f"{self._label()}: the local block has {x.shape[2 + axis]} elements along "
                    f"{DIM_NAMES[axis]} but block {coord} of a global size {size} split over "
                    f"{parts} ranks has {expected}; shard inputs with sciml.spatial_parallel.shard"
                )
        return shape


def native_only(native: tuple[int, int, int], axes: tuple[int, ...]) -> tuple[int, int, int]:
    """The operator's own padding on the axes not assembled explicitly, zero on the others."""
    return tuple(0 if k + 2 in axes else p for k, p in enumerate(native))  # type: ignore[return-value]


def _index(axes: tuple[int, ...], box: Box) -> tuple[slice, ...]:
    index = [slice(None)] * 5
    for axis, (lo, hi) in zip(axes, box, strict=True):
        index[axis] = slice(lo, hi)
    return tuple(index)


class _Assemble(torch.autograd.Function):
    """Write output pieces into one block; the backward hands back views of the gradient."""

    @staticmethod
    def forward(
        ctx: Any, shape: list[int], axes: tuple[int, ...], boxes: list[Box], *parts: torch.Tensor
    ) -> torch.Tensor:
        ctx.index = [_index(axes, box) for box in boxes]
        out = parts[0].new_empty(shape)
        for index, part in zip(ctx.index, parts, strict=True):
            out[index] = part
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return (None, None, None, *(grad[index] for index in ctx.index))


class _AddInto(torch.autograd.Function):
    """``out[index] += part`` in place, without the full-size gradient copy of autograd's
    view bookkeeping; the backward hands ``out``'s gradient through and a view to ``part``."""

    @staticmethod
    def forward(ctx: Any, out: torch.Tensor, index: tuple[slice, ...], *parts: Any) -> Any:
        ctx.index = index
        ctx.mark_dirty(out)
        for box_index, part in zip(index, parts, strict=True):
            out[box_index] += part
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return (grad, None, *(grad[box_index] for box_index in ctx.index))


class _WindowLayer(SpatialLayer):
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
        self._check_input(x)
        halo, native = self._plan(self._global_shape(x))
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
        """Compute the outputs that read only this rank's block while the halos travel,
        then the boundary shell from the assembled halos, and write both into one block."""
        windows = self._windows()
        plans = dict(zip(halo.axes, halo.plans, strict=True))
        full, inner, local_in = [], [], []
        for axis, plan, coord in zip(halo.axes, halo.plans, halo.coords, strict=True):
            w = windows[axis - 2]
            o0, o1 = plan.out_blocks[coord]
            lo, hi = plan.blocks[coord]
            u0 = max(o0, -(-(lo + w.pad_lo) // w.stride))
            u1 = min(o1, (hi - w.reach + w.pad_lo) // w.stride + 1)
            full.append((0, o1 - o0))
            inner.append((u0 - o0, max(u0, u1) - o0))
            local_in.append(
                (
                    u0 * w.stride - w.pad_lo - lo,
                    (max(u0, u1) - 1) * w.stride - w.pad_lo + w.reach - lo,
                )
            )
        has_interior = all(b > a for a, b in inner)
        shells: list[Box] = []
        current = list(full)
        if has_interior:
            for k, (a, b) in enumerate(inner):
                for piece in ((current[k][0], a), (b, current[k][1])):
                    if piece[1] > piece[0]:
                        shells.append(tuple(current[:k] + [piece] + current[k + 1 :]))
                current[k] = (a, b)
        else:
            shells.append(tuple(full))
        alias, token, exchange = halo_start(x, halo)
        boxes, parts = [], []
        if has_interior:
            view = alias
            for axis, (a, b) in zip(halo.axes, local_in, strict=True):
                view = view.narrow(axis, a, b - a)
            parts.append(
                self._post(self._op(view, native), plans, self._ranges(halo, tuple(inner)))
            )
            boxes.append(tuple(inner))
        ext_boxes = []
        for box in shells:
            ext = []
            for k, axis in enumerate(halo.axes):
                w = windows[axis - 2]
                plan, coord = halo.plans[k], halo.coords[k]
                o0 = plan.out_blocks[coord][0]
                a = plan.needs[coord][0]
                v0, v1 = o0 + box[k][0], o0 + box[k][1]
                ext.append(
                    (v0 * w.stride - w.pad_lo - a, (v1 - 1) * w.stride - w.pad_lo + w.reach - a)
                )
            ext_boxes.append(tuple(ext))
        if ext_boxes:
            inputs = halo_finish(token, exchange, ext_boxes)
        else:  # this rank only sends; its backward still answers in halo_start's backward
            exchange.wait()
            exchange.release()
            inputs = ()
        for box, inp in zip(shells, inputs, strict=True):
            parts.append(self._post(self._op(inp, native), plans, self._ranges(halo, box)))
            boxes.append(box)
        shape = list(parts[0].shape)
        for k, axis in enumerate(halo.axes):
            shape[axis] = full[k][1]
        return _Assemble.apply(shape, halo.axes, boxes, *parts)


_BOUNDARIES: dict[str, Boundary] = {
    "zeros": "fill",
    "reflect": "reflect",
    "replicate": "replicate",
    "circular": "circular",
}


class SpatialConv3d(_WindowLayer, nn.Conv3d):
    """:class:`torch.nn.Conv3d` on a spatially split volume (any kernel, stride, dilation,
    padding and padding mode, groups, bias)."""

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

    def _op(self, x: torch.Tensor, padding: tuple[int, int, int]) -> torch.Tensor:
        return F.conv3d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def _additive(self, halo: HaloPlan) -> bool:
        """Stride 1 and symmetric 'same' zero padding on every split axis (depth unsplit):
        the local convolution with zero padding is the output block up to the halo terms."""
        windows = self._windows()
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
        """Convolve the whole block with zeros for the halos while they travel, then add
        the convolution of the received halos to the boundary shell (linearity)."""
        if not self._additive(halo):
            return super()._overlapped(x, halo, native)
        windows = self._windows()
        padding = tuple(windows[k].pad_lo if k + 2 in halo.axes else native[k] for k in range(3))
        alias, token, exchange = halo_start(x, halo)
        out = F.conv3d(alias, self.weight, self.bias, 1, padding, self.dilation, self.groups)
        shells, ext_boxes = [], []
        current = [
            (0, p.out_blocks[c][1] - p.out_blocks[c][0])
            for p, c in zip(halo.plans, halo.coords, strict=True)
        ]
        for k, axis in enumerate(halo.axes):
            w = windows[axis - 2]
            plan, coord = halo.plans[k], halo.coords[k]
            pieces, size = plan.pieces[coord], current[k][1]
            # rows that read a neighbour's block (the global edge is the conv's own padding)
            lo = min(size, w.pad_lo) if pieces[0].source not in (None, coord) else 0
            hi = max(lo, size - (w.reach - 1 - w.pad_lo))
            hi = hi if pieces[-1].source not in (None, coord) else size
            for rows in ((0, lo), (hi, size)):
                if rows[1] > rows[0]:
                    shells.append(tuple(current[:k] + [rows] + current[k + 1 :]))
            current[k] = (lo, hi)
            if hi <= lo:
                break  # no interior left: the shells cover the whole block
        for box in shells:  # output rows -> extended-input rows (ext starts at block - halo)
            ext = []
            for k, axis in enumerate(halo.axes):
                w = windows[axis - 2]
                shift = (
                    halo.plans[k].blocks[halo.coords[k]][0] - halo.plans[k].needs[halo.coords[k]][0]
                )
                a, b = box[k]
                ext.append((a - w.pad_lo + shift, b - 1 - w.pad_lo + w.reach + shift))
            ext_boxes.append(tuple(ext))
        if not shells:
            exchange.wait()
            exchange.release()
            return out
        inputs = halo_finish(token, exchange, ext_boxes, halo_only=True)
        corrections = [
            F.conv3d(
                inp,
                self.weight,
                None,
                1,
                native_only(native, halo.axes),
                self.dilation,
                self.groups,
            )
            for inp in inputs
        ]
        return _AddInto.apply(out, tuple(_index(halo.axes, box) for box in shells), *corrections)

    def _channels(self, x: torch.Tensor) -> int:
        return self.out_channels


class SpatialMaxPool3d(_WindowLayer, nn.MaxPool3d):
    """:class:`torch.nn.MaxPool3d` on a spatially split volume (any kernel, stride,
    padding, dilation, ``ceil_mode``)."""

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
            _triple(v) for v in (self.kernel_size, self.dilation, self.padding)
        )
        stride = _triple(self.stride if self.stride else self.kernel_size)
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


class SpatialAvgPool3d(_WindowLayer, nn.AvgPool3d):
    """:class:`torch.nn.AvgPool3d` on a spatially split volume (any kernel, stride,
    padding, ``ceil_mode``, ``count_include_pad``, ``divisor_override``)."""

    def _check(self) -> None:
        for w in self._windows():
            if 2 * w.pad_lo > w.kernel:
                raise ValueError(
                    f"{self._label()}: padding={self.padding} is more than half the kernel "
                    f"size {self.kernel_size}; torch.nn.AvgPool3d rejects it too"
                )

    def _windows(self) -> tuple[Window, Window, Window]:
        kernel, padding = _triple(self.kernel_size), _triple(self.padding)
        stride = _triple(self.stride if self.stride else self.kernel_size)
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
            factor = torch.tensor(w.kernel / count, dtype=y.dtype, device=y.device).reshape(shape)
            y = y * factor
        return y


class SpatialConvTranspose3d(SpatialLayer, nn.ConvTranspose3d):
    """:class:`torch.nn.ConvTranspose3d` on a spatially split volume (any kernel, stride,
    padding, ``output_padding``, dilation, groups, bias)."""

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
        if output_size is not None:
            raise ValueError(f"{self._label()}: output_size= is not supported on a split volume")
        self._check_input(x)
        halo = self._plan(self._global_shape(x))
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
            y = F.conv_transpose3d(
                x_ext,
                self.weight,
                None,
                self.stride,
                padding,
                output_padding,
                self.groups,
                self.dilation,
            )
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
        if self.bias is not None:
            y = y + self.bias.view(1, -1, 1, 1, 1)
        return y


def _source_index(
    out: np.ndarray,
    size: int,
    out_size: int,
    scale: float | None,
    mode: str,
    align_corners: bool,
    dtype: torch.dtype,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Input indices ``i0, i1`` and the weight of ``i1`` for outputs ``out`` (as PyTorch)."""
    real: Any = np.float64 if dtype == torch.float64 else np.float32
    ratio: Any
    if mode == "trilinear" and align_corners:
        ratio = real((size - 1) / (out_size - 1)) if out_size > 1 else real(0)
    elif scale is not None and scale > 0:
        ratio = real(1.0 / scale)
    else:
        ratio = real(size) / real(out_size)
    o: Any = out.astype(real)
    if mode == "nearest":
        if out_size == size:
            i0 = out
        elif out_size == 2 * size:
            i0 = out >> 1
        else:
            i0 = np.minimum(np.floor(o * ratio).astype(np.int64), size - 1)
        return i0, i0, np.zeros(len(out))
    if mode == "nearest-exact":
        i0 = np.minimum(np.floor((o + real(0.5)) * ratio).astype(np.int64), size - 1)
        return i0, i0, np.zeros(len(out))
    src = ratio * o if align_corners else np.maximum(ratio * (o + real(0.5)) - real(0.5), real(0))
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < size - 1)
    return i0, i1, np.clip(src - i0.astype(real), 0, 1).astype(np.float64)


class SpatialUpsample(SpatialLayer, nn.Upsample):
    """:class:`torch.nn.Upsample` on a split volume: ``nearest``, ``nearest-exact`` and
    ``trilinear`` (``align_corners`` either way; ``False`` reads a one-voxel halo)."""

    MODES = ("nearest", "nearest-exact", "trilinear")

    def _check(self) -> None:
        if self.mode not in self.MODES:
            raise ValueError(
                f"{self._label()}: mode={self.mode!r} is not supported on a 3D split volume; "
                f"use one of {self.MODES}"
            )
        if self.align_corners is not None and self.mode != "trilinear":
            raise ValueError(
                f"{self._label()}: align_corners is only for the interpolating mode 'trilinear', "
                f"got mode={self.mode!r}; torch.nn.Upsample rejects it too"
            )
        if (self.size is None) == (self.scale_factor is None):
            raise ValueError(
                f"{self._label()}: give exactly one of size and scale_factor, got size="
                f"{self.size!r}, scale_factor={self.scale_factor!r}"
            )

    def _sizes(self, shape: tuple[int, int, int]) -> list[tuple[int, float | None]]:
        if self.size is not None:
            return [(s, None) for s in _triple(self.size)]
        factor = self.scale_factor
        factors = list(factor) if isinstance(factor, tuple | list) else [factor] * 3
        keep = not self.recompute_scale_factor
        return [
            (math.floor(n * float(f)), float(f) if keep else None)  # type: ignore[arg-type]
            for n, f in zip(shape, factors, strict=True)
        ]

    def _plan(self, shape: tuple[int, int, int]) -> tuple[HaloPlan, list[Any]]:
        if shape not in self._plans:
            axes, plans, steps = [], [], []
            align = bool(self.align_corners)
            for k, ((out, scale), size, parts, coord) in enumerate(
                zip(
                    self._sizes(shape), shape, self.mesh.grid, self.mesh.spatial_coords, strict=True
                )
            ):
                needs = []
                for lo, hi in block_bounds(out, parts):
                    i0, i1, _ = _source_index(
                        np.arange(lo, hi), size, out, scale, self.mode, align, torch.float64
                    )
                    needs.append((int(i0.min()), int(i1.max()) + 1) if hi > lo else (0, 0))
                lo, hi = block_bounds(out, parts)[coord]
                steps.append((k + 2, np.arange(lo, hi), size, out, scale, needs[coord][0]))
                if parts > 1:
                    axes.append(k + 2)
                    plans.append(
                        plan_dim(size, parts, out, needs, layer=self._label(), dim=DIM_NAMES[k])
                    )
            self._plans[shape] = (build_halo_plan(self.mesh, tuple(axes), tuple(plans)), steps)
        return self._plans[shape]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        halo, steps = self._plan(self._global_shape(x))
        y = halo_extend(x, halo) if halo.axes else x
        for axis, out, size, out_size, scale, origin in steps:
            if axis not in halo.axes:
                origin = 0
            if len(out) == 0:
                shape = list(y.shape)
                shape[axis] = 0
                y = empty_connected(y, shape)
                continue
            i0, i1, weight = _source_index(
                out, size, out_size, scale, self.mode, bool(self.align_corners), x.dtype
            )
            first = y.index_select(axis, torch.as_tensor(i0 - origin, device=y.device))
            if self.mode != "trilinear":
                y = first
                continue
            second = y.index_select(axis, torch.as_tensor(i1 - origin, device=y.device))
            shape = [1] * 5
            shape[axis] = len(out)
            lam = torch.as_tensor(weight, dtype=y.dtype, device=y.device).reshape(shape)
            y = first + (second - first) * lam
        return y
