"""The layers of a model as the planner sees them: global shapes, windows, FLOPs, saved tensors.

:func:`trace` runs the single-device model once on PyTorch's ``meta`` device
(no memory, no arithmetic) with a sample of the global input shape and
records, for every leaf module in execution order, its type, global input
and output shapes, the sliding-window geometry of each spatial dim (the
:mod:`~sciml.spatial_parallel.partition` objects the parallel layers plan
with), its forward FLOPs and its parameters. Tensors that autograd keeps for
the backward pass are caught with :func:`torch.autograd.graph.saved_tensors_hooks`
and counted once per storage (an in-place ReLU's output is its input), so the
activation memory follows PyTorch itself rather than a table. A second pass,
without autograd, finds how long the model's own code holds each layer's
input and output (``Layer.input_held``, ``Layer.output_held``).

The walk uses only public things: module types and hyper-parameters (the
layer table, :mod:`~sciml.spatial_parallel.layers.table`, says which layers
split and how each is priced), shape propagation and autograd's saved tensors.
"""

from __future__ import annotations

import copy
import gc
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from sciml.spatial_parallel.layers.base import triple
from sciml.spatial_parallel.layers.table import CONTAINERS, CostKind, supported_spec
from sciml.spatial_parallel.partition import TransposeWindow, Window
from sciml.spatial_parallel.split.contract import TOKEN_MIXING
from sciml.spatial_parallel.split.op_names import aten_name, op_name, user_line

#: Geometry of one layer along the three spatial dims (``None``: no halo).
Windows = tuple[Window | TransposeWindow, ...] | None

#: Costs of normalisation layers, which reduce statistics over the split volume.
NORM_KINDS: tuple[CostKind, ...] = ("BatchNorm3d", "GroupNorm", "InstanceNorm3d")
#: Costs of pooling layers (a sliding window without weights).
POOL_COSTS: tuple[CostKind, ...] = ("MaxPool3d", "AvgPool3d")


@dataclass(frozen=True)
class Saved:
    """A tensor autograd keeps for backward: global shape, bytes per element, layer."""

    shape: tuple[int, ...]
    itemsize: int
    layer: int

    @property
    def split(self) -> bool:
        """Whether it is an ``(N, C, D, H, W)`` block, split like the activations."""
        return len(self.shape) == 5


@dataclass(frozen=True)
class Layer:
    """One leaf module of the traced model (global sizes).

    Attributes:
        name: Qualified module name.
        kind: Module class name (``"Conv3d"``, ``"ReLU"``...), or that of the supported
            layer it subclasses.
        cost: How the planner prices it: its entry's ``cost`` in the layer table
            (:mod:`sciml.spatial_parallel.layers.table`), ``"elementwise"`` for others.
        in_shape: Global input shape.
        out_shape: Global output shape.
        windows: Per-dim geometry of window and transposed-convolution layers.
        flops: Forward floating-point operations on the global input.
        params: Trainable parameter elements.
        channels: Channels whose statistics a normalisation layer reduces (else 0).
        itemsize: Bytes per activation element.
        groups: Convolution groups (1 for other layers).
        input_kept: Whether its input stays alive for backward anyway (the model
            input, or a tensor another layer keeps): a split window layer that
            assembles halos then keeps a second, extended copy.
        input_held: Later layers whose forward runs while the model's code still
            holds this layer's input (the first layer of a block called on it,
            ``y = block(x)``, runs the whole block before ``x`` is let go).
        output_held: Later layers whose forward runs while the model's code
            still holds this layer's output, which autograd does not keep (0
            when it does): ``x = up(x); y = block(cat([x, skip]))`` holds the
            upsampled ``x`` through ``block``.
    """

    name: str
    kind: str
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    windows: Windows
    flops: float
    params: int
    channels: int
    itemsize: int
    groups: int = 1
    cost: CostKind = "elementwise"
    input_kept: bool = False
    input_held: int = 0
    output_held: int = 0


@dataclass(frozen=True)
class Graph:
    """A traced model: its layers in execution order and the tensors kept for backward."""

    sample_shape: tuple[int, int, int, int, int]
    layers: tuple[Layer, ...]
    saved: tuple[Saved, ...]

    @property
    def params(self) -> int:
        """Trainable parameter elements of the whole model."""
        return sum(layer.params for layer in self.layers)


def _windows(module: Any, cost: CostKind) -> Windows:
    """The per-dim geometry of a layer priced as a convolution or pooling (else ``None``)."""
    if cost == "Conv3d":
        kernel, stride, dilation = module.kernel_size, module.stride, module.dilation
        if module.padding == "same":
            pads = [
                ((d * (k - 1)) // 2, d * (k - 1) - (d * (k - 1)) // 2)
                for k, d in zip(kernel, dilation, strict=True)
            ]
        elif module.padding == "valid":
            pads = [(0, 0)] * 3
        else:
            pads = [(int(p), int(p)) for p in module.padding]
        return tuple(Window(kernel[k], stride[k], dilation[k], *pads[k]) for k in range(3))
    if cost == "ConvTranspose3d":
        return tuple(
            TransposeWindow(
                module.kernel_size[k],
                module.stride[k],
                module.dilation[k],
                int(module.padding[k]),
                int(module.output_padding[k]),
            )
            for k in range(3)
        )
    if cost in POOL_COSTS:
        kernel = triple(module.kernel_size)
        stride = triple(module.stride or module.kernel_size)
        padding = triple(module.padding)
        dilation = triple(getattr(module, "dilation", 1))
        return tuple(
            Window(kernel[k], stride[k], dilation[k], padding[k], padding[k], module.ceil_mode)
            for k in range(3)
        )
    return None


def _flops(module: Any, cost: CostKind, x: torch.Tensor, y: torch.Tensor) -> float:
    """Forward FLOPs (a multiply-add counts 2) of ``module`` from ``x`` to ``y``."""
    if cost == "Conv3d":
        fan_in = module.in_channels // module.groups * math.prod(module.kernel_size)
        return 2.0 * y.numel() * fan_in
    if cost == "ConvTranspose3d":
        fan_out = module.out_channels // module.groups * math.prod(module.kernel_size)
        return 2.0 * x.numel() * fan_out
    if cost == "Linear":
        return 2.0 * y.numel() * module.in_features
    if cost in POOL_COSTS:
        return float(y.numel() * math.prod(triple(module.kernel_size)))
    if cost in NORM_KINDS:
        return 8.0 * x.numel()  # two passes of statistics, normalise, scale and shift
    return float(max(x.numel(), y.numel()))  # elementwise, pooling to one voxel, upsampling


def _cost(module: nn.Module, name: str) -> tuple[str, CostKind]:
    """What ``parallelize`` takes ``module`` for, and how the layer table prices it.

    The first is its class, or the supported one it extends.
    """
    spec = supported_spec(module, name)
    if spec is None:
        return type(module).__name__, "elementwise"
    return spec.module.__name__, spec.cost


def _check_supported(model: nn.Module) -> None:
    """Raise naming the first leaf layer that ``parallelize`` would refuse."""
    for name, module in model.named_modules():
        if list(module.children()) or isinstance(module, CONTAINERS):
            continue
        if supported_spec(module, name) is None and (
            list(module.parameters(recurse=False)) or type(module).__module__.startswith("torch.nn")
        ):
            raise ValueError(
                f"planner: layer '{name}' ({type(module).__name__}) cannot be split in "
                f"space (parallelize refuses it); the planner models the layers of "
                f"sciml.spatial_parallel.layers.table.LAYERS"
            )


class _Unpriced(Exception):
    """The model's forward mixes tokens, which the planner does not price (the message)."""


class _TokenMixing(TorchFunctionMode):
    """Stop at the first contraction of 3- or 4-D operands: attention over tokens."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self.model = model

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        operands = [*args, *kwargs.values()]
        operands += [t for a in operands if isinstance(a, list | tuple) for t in a]
        if aten_name(func) in TOKEN_MIXING and any(
            isinstance(t, torch.Tensor) and t.dim() in (3, 4) for t in operands
        ):
            raise _Unpriced(
                f"planner: {self.model} computes {op_name(func)} on tokens at {user_line()}; "
                f"parallelize runs it exactly on operands gathered whole on every rank, and "
                f"the planner does not price those gathers (their memory and all-gathers), "
                f"so it recommends no grid for this model"
            )
        return func(*args, **kwargs)


def _held(meta: nn.Module, x: torch.Tensor) -> tuple[list[int], list[int]]:
    """Per leaf layer, the later layers that start before its input, and its output, are let go.

    A forward pass of ``meta`` on ``x`` without autograd (which would keep
    the tensors it saves) in which nothing outside the model holds a layer's
    tensors: a finalizer on each input and output counts the layers started
    by the time the model's code lets it go.
    """
    started = [0]
    last: dict[tuple[str, int], int] = {}

    def count(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        started[0] += 1

    def died(key: tuple[str, int]) -> None:
        last[key] = started[0]

    def watch(module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        index = started[0] - 1
        for role, tensor in (("input", args[0]), ("output", out)):
            weakref.finalize(tensor, died, (role, index))

    leaves = [m for m in meta.modules() if not list(m.children())]
    handles = [m.register_forward_pre_hook(count) for m in leaves]
    handles += [m.register_forward_hook(watch) for m in leaves]
    try:
        with torch.no_grad():
            meta(x)
    finally:
        for handle in handles:
            handle.remove()
    gc.collect()
    return tuple(  # type: ignore[return-value]
        [last.get((role, i), started[0]) - 1 - i for i in range(started[0])]
        for role in ("input", "output")
    )


def trace(model: nn.Module, sample_shape: Sequence[int]) -> Graph:
    """The layers of ``model`` on a global input of ``sample_shape`` ``(N, C, D, H, W)``.

    ``model`` is copied to the ``meta`` device (it is not modified) and run forward once
    on an input of its parameters' dtype (float32 for a model without parameters).

    Raises:
        ValueError: If the shape is not five positive sizes, a layer cannot be split
            in space, or the model rejects the shape (its own message is kept).
    """
    shape = tuple(sample_shape)
    if len(shape) != 5 or not all(
        isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape
    ):
        raise ValueError(
            f"planner: sample_shape must be 5 positive sizes (N, C, D, H, W), got {shape}"
        )
    if not isinstance(model, nn.Module):
        raise TypeError(f"planner: expected a torch.nn.Module, got {type(model).__name__}")
    _check_supported(model)
    dtype = next(model.parameters(), torch.empty(0)).dtype
    meta = copy.deepcopy(model).to(device="meta")
    meta.train()
    x = torch.empty(shape, device="meta", dtype=dtype)
    # the input block is held by the loader anyway: a memory term of its own
    weights = {t.untyped_storage()._cdata for t in [*meta.parameters(), *meta.buffers(), x]}
    layers: list[Layer] = []
    saved: dict[int, Saved] = {}
    savers: dict[int, set[int]] = {x.untyped_storage()._cdata: {-1}}  # -1: the loader
    inputs: list[int] = []
    outputs: list[int] = []
    keep: list[torch.Tensor] = []  # storages stay alive, so their addresses stay unique

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage()._cdata
        savers.setdefault(key, set()).add(len(layers))
        if key not in weights and key not in saved:
            keep.append(t)
            full = t.untyped_storage().nbytes() // t.element_size()
            shp = tuple(t.shape) if t.numel() == full else (full,)
            saved[key] = Saved(shp, t.element_size(), len(layers))
        return t

    def record(name: str):  # noqa: ANN202
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            x = args[0]
            kind, cost = _cost(module, name)
            keep.extend((x, out))
            inputs.append(x.untyped_storage()._cdata)
            outputs.append(out.untyped_storage()._cdata)
            layers.append(
                Layer(
                    name=name,
                    kind=kind,
                    cost=cost,
                    in_shape=tuple(x.shape),
                    out_shape=tuple(out.shape),
                    windows=_windows(module, cost),
                    flops=_flops(module, cost, x, out),
                    params=sum(p.numel() for p in module.parameters() if p.requires_grad),
                    channels=x.shape[1] if cost in NORM_KINDS else 0,
                    itemsize=x.element_size(),
                    groups=int(getattr(module, "groups", 1)),
                )
            )

        return hook

    handles = [
        module.register_forward_hook(record(name))
        for name, module in meta.named_modules()
        if not list(module.children())
    ]
    try:
        with (
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
            _TokenMixing(type(model).__name__),
        ):
            meta(x)
    except _Unpriced as err:
        raise ValueError(str(err)) from None
    except (RuntimeError, ValueError) as err:
        raise ValueError(
            f"planner: {type(model).__name__} rejects input shape {shape}: {err}"
        ) from None
    finally:
        for handle in handles:
            handle.remove()
    kept = [bool(savers.get(key, set()) - {index}) for index, key in enumerate(inputs)]
    inputs_held, outputs_held = _held(meta, torch.empty(shape, device="meta", dtype=dtype))
    layers = [
        replace(
            layer,
            input_kept=k,
            input_held=held_in,
            output_held=0 if out in saved else held_out,
        )
        for layer, k, held_in, held_out, out in zip(
            layers, kept, inputs_held, outputs_held, outputs, strict=True
        )
    ]
    return Graph(shape, tuple(layers), tuple(saved.values()))
