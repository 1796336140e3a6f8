"""The CPU convolution kernel a block gets, and a layout that gives it the unsplit layer's.

PyTorch's CPU convolution runs on oneDNN only where a heuristic on the input
shape holds (``use_mkldnn`` in ``aten/src/ATen/native/Convolution.cpp``): in
float32, a batch-1 input with ``groups == 1`` and a kernel of at most 3 along
one of its last two dims needs ``N * C * D * H > 20480``, ``W`` ignored;
otherwise it falls back to the native ``vol2col`` kernel (``Slow3d``), many times
slower: the ``(1, 16, 26, 48, 48)`` block of a depth-split 48^3 volume, on that
kernel, takes longer than the whole volume on oneDNN. A split
block, thinner than the whole tensor, can fall below the threshold where the
unsplit layer did not. A permutation of the three spatial axes, applied alike
to the input, the weight and the geometry, is the same convolution:
:func:`fast_layout` picks one under which the block gets the unsplit layer's
kernel. The selector only reads the shape: a (not transposed) convolution then
calls oneDNN directly on the block in its own layout (:class:`OneDNNConvolution`),
which spares the copies in and out of the permuted layout; only its weight
gradient, which has no oneDNN op of its own, is computed in the permuted
layout. A transposed convolution runs in the permuted layout
(:func:`permuted_convolution`). CUDA tensors, float64 (never oneDNN) and
bfloat16 (always oneDNN where the CPU supports it) keep their layout.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.function import FunctionCtx

from sciml.spatial_parallel.layers.base import autocast_dtype

Triple = tuple[int, int, int]
#: Spatial axes in their own order.
IDENTITY: Triple = (0, 1, 2)
_BACKENDS: Any = torch._C._ConvBackend  # type: ignore[attr-defined]
_NAMES = {int(value): name for name, value in _BACKENDS.__members__.items()}
# PyTorch's Python enum leaves MkldnnTranspose, declared right after Mkldnn, unnamed
_NAMES.setdefault(int(_BACKENDS.Mkldnn) + 1, "MkldnnTranspose")
#: The names :func:`cpu_backend` gives oneDNN's convolutions.
ONEDNN = frozenset({"Mkldnn", "MkldnnTranspose"})
#: What :func:`cpu_backend` answers for a shape the convolution rejects (a kernel
#: larger than the padded input).
INVALID = "Invalid"


@dataclass(frozen=True)
class ConvGeometry:
    """A 3D convolution's parameters, as ``torch.nn.functional`` takes them.

    ``weight`` is the weight's shape: ``(out, in / groups, kD, kH, kW)``, or
    ``(in, out / groups, kD, kH, kW)`` when ``transposed``.
    """

    weight: tuple[int, ...]
    stride: Triple
    padding: Triple
    dilation: Triple
    groups: int
    transposed: bool = False
    output_padding: Triple = (0, 0, 0)

    def permuted(self, perm: Triple) -> ConvGeometry:
        """The same convolution with its spatial axes in the order ``perm``."""

        def move(values: Triple) -> Triple:
            return (values[perm[0]], values[perm[1]], values[perm[2]])

        return ConvGeometry(
            weight=(*self.weight[:2], *move(self.weight[2:])),  # type: ignore[arg-type]
            stride=move(self.stride),
            padding=move(self.padding),
            dilation=move(self.dilation),
            groups=self.groups,
            transposed=self.transposed,
            output_padding=move(self.output_padding),
        )


def _dims(perm: Triple) -> tuple[int, int, int, int, int]:
    """The tensor dims that put the spatial axes in the order ``perm``."""
    return (0, 1, perm[0] + 2, perm[1] + 2, perm[2] + 2)


def _inverse(perm: Triple) -> Triple:
    inverse = [0, 0, 0]
    for position, axis in enumerate(perm):
        inverse[axis] = position
    return (inverse[0], inverse[1], inverse[2])


@functools.lru_cache(maxsize=1024)
def _select(
    shape: tuple[int, ...], dtype: torch.dtype, geometry: ConvGeometry, threads: int, onednn: bool
) -> str:
    # zero-stride stand-ins: the selector reads only shapes, dtypes and the device
    x = torch.empty((), dtype=dtype).expand(shape)
    weight = torch.empty((), dtype=dtype).expand(geometry.weight)
    try:
        backend: Any = torch._C._select_conv_backend(
            x,
            weight,
            None,
            list(geometry.stride),
            list(geometry.padding),
            list(geometry.dilation),
            geometry.transposed,
            list(geometry.output_padding),
            geometry.groups,
            None,
        )
    except RuntimeError:  # a shape the convolution itself rejects, with its own message
        return INVALID
    return _NAMES.get(int(backend), str(backend))


def cpu_backend(shape: Sequence[int], dtype: torch.dtype, geometry: ConvGeometry) -> str:
    """The kernel PyTorch's CPU convolution runs on an input of ``shape`` (``"Slow3d"``...).

    Asks PyTorch's own selector, under this process's intra-op threads and
    ``torch.backends.mkldnn`` setting (both enter the choice); :data:`INVALID`
    where the convolution would raise.
    """
    return _select(
        tuple(int(s) for s in shape),
        dtype,
        geometry,
        torch.get_num_threads(),
        bool(torch.backends.mkldnn.enabled),
    )


@torch.compiler.disable  # shapes in, a choice out: run as Python, not traced
def fast_layout(
    block: Sequence[int], unsplit: Sequence[int], dtype: torch.dtype, geometry: ConvGeometry
) -> Triple:
    """The order of the spatial axes in which ``block`` gets the kernel ``unsplit`` would.

    ``block`` is the input a rank convolves (with its halos), ``unsplit`` the
    layer's whole input on one device. Only a move onto oneDNN is made; the
    identity when the block already gets the unsplit layer's kernel, when that
    is not oneDNN, or when no order reaches it. Among the orders that reach it,
    the one with the largest ``D * H`` (the heuristic's factor), ties in the
    block's own order.
    """
    own = cpu_backend(block, dtype, geometry)
    if own in ONEDNN or cpu_backend(unsplit, dtype, geometry) not in ONEDNN:
        return IDENTITY
    orders = sorted(
        itertools.permutations(range(3)), key=lambda p: -block[p[0] + 2] * block[p[1] + 2]
    )
    for perm in orders:
        moved = tuple(block[d] for d in _dims(perm))  # type: ignore[arg-type]
        if cpu_backend(moved, dtype, geometry.permuted(perm)) in ONEDNN:  # type: ignore[arg-type]
            return perm  # type: ignore[return-value]
    return IDENTITY


def _call(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, geometry: ConvGeometry
) -> torch.Tensor:
    if geometry.transposed:
        return F.conv_transpose3d(
            x,
            weight,
            bias,
            geometry.stride,
            geometry.padding,
            geometry.output_padding,
            geometry.groups,
            geometry.dilation,
        )
    return F.conv3d(
        x, weight, bias, geometry.stride, geometry.padding, geometry.dilation, geometry.groups
    )


def permuted_convolution(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    geometry: ConvGeometry,
    perm: Triple,
) -> torch.Tensor:
    """The convolution of ``x``, computed with the spatial axes in the order ``perm``.

    The result is in ``x``'s own order, contiguous as the op's own (code
    that views it works alike), with autograd through both permutations.
    """
    if perm == IDENTITY:
        return _call(x, weight, bias, geometry)
    dims = _dims(perm)
    # contiguous before the call, so that autograd keeps the copy the kernel reads and the
    # backward does not copy the permuted view again
    moved = x.permute(dims).contiguous()
    y = _call(moved, weight.permute(dims), bias, geometry.permuted(perm))
    return y.permute(_dims(_inverse(perm))).contiguous()


def convolution(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    geometry: ConvGeometry,
    *,
    unsplit: Sequence[int],
) -> torch.Tensor:
    """``x``'s convolution on the kernel the unsplit input (shape ``unsplit``) would get.

    On the CPU, on the kernel :func:`fast_layout`'s layout reaches (under
    ``torch.autocast``, for the dtype it computes in; :func:`layout_convolution`);
    elsewhere as given.
    """
    if x.device.type != "cpu":
        return _call(x, weight, bias, geometry)
    dtype = autocast_dtype(x) or x.dtype
    perm = fast_layout(tuple(x.shape), tuple(unsplit), dtype, geometry)
    return layout_convolution(x, weight, bias, geometry, perm)


def layout_convolution(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    geometry: ConvGeometry,
    perm: Triple,
) -> torch.Tensor:
    """The convolution of ``x`` on the kernel the layout ``perm`` reaches.

    Where ``perm`` moves a float32 (not transposed) convolution onto oneDNN,
    :class:`OneDNNConvolution` runs it there in ``x``'s own layout; otherwise
    :func:`permuted_convolution`. Under ``torch.compile``, always the latter.
    """
    direct = (
        perm != IDENTITY
        and not geometry.transposed
        and x.dtype == weight.dtype == torch.float32
        and autocast_dtype(x) is None
        and not torch.compiler.is_compiling()
    )
    if direct:
        out: torch.Tensor = OneDNNConvolution.apply(x, weight, bias, geometry, perm)
        return out
    return permuted_convolution(x, weight, bias, geometry, perm)


def _flipped(weight: torch.Tensor, groups: int) -> torch.Tensor:
    """The weight of the convolution that is ``weight``'s adjoint at stride 1.

    ``(out, in / groups, k...)`` becomes ``(in, out / groups, k...)``, group by
    group, with every spatial axis reversed.
    """
    out, per_group, *kernel = weight.shape
    grouped = weight.reshape(groups, out // groups, per_group, *kernel).transpose(1, 2)
    return grouped.reshape(groups * per_group, out // groups, *kernel).flip(2, 3, 4)


def _adjoint_padding(geometry: ConvGeometry) -> Triple | None:
    """Padding of the stride-1 convolution that gives the input gradient, or None.

    ``dilation * (kernel - 1) - padding`` on each axis; None where the forward
    has a stride or pads more than its kernel reaches.
    """
    if geometry.stride != (1, 1, 1):
        return None
    pads = tuple(
        d * (k - 1) - p
        for d, k, p in zip(geometry.dilation, geometry.weight[2:], geometry.padding, strict=True)
    )
    return pads if min(pads) >= 0 else None  # type: ignore[return-value]


def _onednn(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, geometry: ConvGeometry
) -> torch.Tensor:
    out: torch.Tensor = torch.ops.aten.mkldnn_convolution(
        x,
        weight,
        bias,
        list(geometry.padding),
        list(geometry.stride),
        list(geometry.dilation),
        geometry.groups,
    )
    return out


class OneDNNConvolution(torch.autograd.Function):
    """A float32 convolution on oneDNN in the input's own layout, forward and backward.

    PyTorch's ``mkldnn_convolution`` runs any shape on oneDNN, but its
    backward goes through ``convolution_backward``, whose kernel choice reads
    the shape again. The input gradient is the adjoint convolution, itself a
    ``mkldnn_convolution`` at stride 1 (:func:`_adjoint_padding`); otherwise,
    and for the weight and bias gradients, ``convolution_backward`` is given
    the tensors in the layout ``perm`` (``fast_layout``'s), where its choice is
    oneDNN. Its backward is made of differentiable ops, so a gradient penalty
    (``create_graph=True``) differentiates it again.
    """

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        geometry: ConvGeometry,
        perm: Triple,
    ) -> torch.Tensor:
        """``x``'s convolution by ``mkldnn_convolution``."""
        ctx.save_for_backward(x, weight)
        ctx.geometry, ctx.perm = geometry, perm  # type: ignore[attr-defined]
        return _onednn(x, weight, bias, geometry)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Input gradient by the adjoint convolution; weight and bias in the moved layout."""
        x, weight = ctx.saved_tensors
        geometry: ConvGeometry = ctx.geometry
        need_x, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad = grad.contiguous()
        grad_x = None
        adjoint = _adjoint_padding(geometry)
        if need_x and adjoint is not None:
            flipped = _flipped(weight, geometry.groups)
            transpose = ConvGeometry(
                tuple(flipped.shape), (1, 1, 1), adjoint, geometry.dilation, geometry.groups
            )
            grad_x = _onednn(grad, flipped, None, transpose)
        mask = [need_x and grad_x is None, need_weight, need_bias]
        grad_weight = grad_bias = None
        if any(mask):
            dims, back = _dims(ctx.perm), _dims(_inverse(ctx.perm))
            moved = geometry.permuted(ctx.perm)
            moved_x, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
                grad.permute(dims),
                x.permute(dims),
                weight.permute(dims),
                [weight.shape[0]] if need_bias else None,
                list(moved.stride),
                list(moved.padding),
                list(moved.dilation),
                False,
                [0, 0, 0],
                geometry.groups,
                mask,
            )
            if mask[0]:
                grad_x = moved_x.permute(back).contiguous()
            if need_weight:
                grad_weight = grad_weight.permute(back)
        return grad_x, grad_weight, grad_bias, None, None
