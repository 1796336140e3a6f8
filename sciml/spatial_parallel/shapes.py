"""Global shapes without communication: every layer's from the model input's, by tracing.

A split layer needs the *global* shape of its input to know every rank's
block. Asking the other ranks on every forward pass (a collective, and under
NCCL a host synchronisation) is what this module avoids. The parallel model
learns the global shape of its input once per forward pass:

1. from the tensor itself: :func:`~sciml.spatial_parallel.shard` marks its
   result with the global shape (:func:`mark_global`);
2. else from the declaration ``parallelize(..., input_shape=(D, H, W))`` (the
   batch is then the local batch on one replica, or one collective over the
   data-parallel replicas);
3. else by one collective over all ranks at the model entry (the documented
   fallback: correct, one small all-reduce per forward pass).

It then runs the single-device model on the ``meta`` device (no memory, no
arithmetic) for that global shape, once per shape, and records the global
input shape of every swapped layer in call order. During the parallel
forward pass each layer takes its entry in turn. Every rank derives the same
table from the same global shape, so no rank can wait for a collective that
another rank skipped. A layer called outside its model's forward pass (or a
model that cannot run on ``meta``) does one collective per layer instead.
"""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict, defaultdict
from typing import Any, overload

import torch
from torch import nn

from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.replicated import is_replicated, is_split_volume

GLOBAL_TAG = "_sciml_global_shape"
#: Traced global input shapes kept per model (one per distinct global input shape).
CACHE_SIZE = 16

Shape = tuple[int, ...]
#: A traced forward pass: each layer's global input shapes in call order, the
#: global shape of each model output tensor (``None`` for non-tensors), and each
#: layer's global output shapes in call order (``None`` for non-tensors).
Trace = tuple[dict[str, list[Shape]], list[Shape | None], dict[str, list[Shape | None]]]


def mark_global(x: torch.Tensor, shape: Shape) -> torch.Tensor:
    """Mark ``x`` (a rank's block) with the global ``shape`` it is a block of; returns ``x``."""
    setattr(x, GLOBAL_TAG, tuple(int(s) for s in shape))
    return x


def marked_global(x: torch.Tensor) -> Shape | None:
    """The global shape ``x`` was marked with by :func:`mark_global`, if any."""
    shape = getattr(x, GLOBAL_TAG, None)
    return shape if isinstance(shape, tuple) else None


def meta_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose parameters and buffers live on the ``meta`` device.

    Nothing is copied: the memo maps each tensor to an empty meta tensor first,
    but for 0-dim buffers, copied as they are: a batch norm with ``momentum=None``
    reads its count of batches as a Python number.
    """
    memo: dict[int, Any] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.dim() == 0:  # a count the forward reads as a number (num_batches_tracked)
            memo[id(tensor)] = tensor.detach().clone()
            continue
        meta = torch.empty_like(tensor, device="meta")
        if isinstance(tensor, nn.Parameter):
            meta = nn.Parameter(meta, requires_grad=tensor.requires_grad)
        memo[id(tensor)] = meta
    return copy.deepcopy(model, memo)


class ShapeTrace:
    """The global input shape of every split layer of one parallel model, per forward pass.

    Args:
        meta: The single-device model on the ``meta`` device (:func:`meta_copy`).
        names: The qualified names of the layers to trace (as in ``named_modules``).
        mesh: The process grid.
        input_shape: The declared global ``(D, H, W)`` of the model input, or ``None``.
    """

    def __init__(
        self,
        meta: nn.Module,
        names: list[str],
        mesh: SpatialMesh,
        *,
        input_shape: tuple[int, int, int] | None = None,
    ) -> None:
        """Hook the traced layers of ``meta`` (arguments: see the class)."""
        self.meta, self.mesh, self.input_shape = meta, mesh, input_shape
        self.cache: OrderedDict[tuple[Any, ...], Trace | None] = OrderedDict()
        self.current: Trace | None = None
        #: Whether the model's forward pass is running (with or without a trace).
        self.inside = False
        self.calls: defaultdict[str, int] = defaultdict(int)
        self._recording: dict[str, list[Shape]] | None = None
        self._outputs: dict[str, list[Shape | None]] = {}
        #: The global shapes of the current call's positional and keyword inputs
        #: (``None`` for what is not a split block).
        self.entry: tuple[list[Shape | None], dict[str, Shape | None]] = ([], {})
        modules = dict(meta.named_modules())
        for name in names:
            modules[name].register_forward_pre_hook(self._recorder(name))
            modules[name].register_forward_hook(self._output_recorder(name))

    def _recorder(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            if self._recording is not None and args and isinstance(args[0], torch.Tensor):
                self._recording.setdefault(name, []).append(tuple(args[0].shape))

        return hook

    def _output_recorder(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if self._recording is not None:
                shape = tuple(output.shape) if isinstance(output, torch.Tensor) else None
                self._outputs.setdefault(name, []).append(shape)

        return hook

    # model entry and exit ----------------------------------------------------------------
    def begin(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Find the global input shapes and select (or trace) their table for ``model``."""
        meta_args = [self._meta_input(a) for a in args]
        meta_kwargs = {k: self._meta_input(v) for k, v in kwargs.items()}
        self.entry = (
            [_split_shape(a, m) for a, m in zip(args, meta_args, strict=True)],
            {k: _split_shape(v, meta_kwargs[k]) for k, v in kwargs.items()},
        )
        key = tuple(
            (tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else repr(a)
            for a in [*meta_args, *sorted(meta_kwargs.items())]
        )
        if key not in self.cache:
            meta_modules = dict(self.meta.named_modules())
            for name, module in model.named_modules():  # train/eval as the parallel model
                meta_modules[name].training = module.training
            self.cache[key] = self._trace(meta_args, meta_kwargs)
            if len(self.cache) > CACHE_SIZE:
                self.cache.popitem(last=False)
        self.current = self.cache[key]
        self.calls = defaultdict(int)
        self.inside = True

    def end(self, output: Any) -> None:
        """Mark the split outputs with their global shapes and leave the forward pass.

        Layers called from now on ask the other ranks.
        """
        if self.current is not None:
            for tensor, shape in zip(_tensors(output), self.current[1], strict=False):
                split = tensor is not None and not is_replicated(tensor)
                if split and shape is not None and len(shape) == 5:
                    mark_global(tensor, shape)  # type: ignore[arg-type]
        self.current = None
        self.inside = False

    def _meta_input(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        shape = tuple(value.shape)
        if is_split_volume(value):
            shape = self.global_input(value)
        return torch.empty(shape, dtype=value.dtype, device="meta")

    def global_input(self, x: torch.Tensor) -> Shape:
        """The global shape of a split model input: marked, declared, or one collective."""
        marked = marked_global(x)
        if marked is not None:
            return marked
        if self.input_shape is None:
            return self.mesh.global_shape(x.shape)
        batch = x.shape[0] if self.mesh.data == 1 else self.mesh.global_batch(x.shape[0])
        return (batch, x.shape[1], *self.input_shape)

    def _trace(self, args: list[Any], kwargs: dict[str, Any]) -> Trace | None:
        self._recording, self._outputs = {}, {}
        empty = any(_empty_batch(a) for a in [*args, *kwargs.values()])
        try:
            with torch.no_grad():
                output = self.meta(
                    *_one_sample(args),
                    **dict(zip(kwargs, _one_sample(kwargs.values()), strict=True)),
                )
            shapes = [None if t is None else tuple(t.shape) for t in _tensors(output)]
            if empty:
                outputs = {k: [_no_sample(s) for s in v] for k, v in self._outputs.items()}
                inputs = {k: [_no_sample(s) for s in v] for k, v in self._recording.items()}
                return inputs, [_no_sample(s) for s in shapes], outputs
            return self._recording, shapes, self._outputs
        except Exception as err:  # noqa: BLE001 - any failure: the layers ask the other ranks
            warnings.warn(
                f"spatial_parallel: the single-device model does not run on the meta device "
                f"for inputs {[tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]} "
                f"({type(err).__name__}: {err}); every split layer does one collective per "
                f"forward pass to find its global shape instead",
                stacklevel=4,
            )
            return None
        finally:
            self._recording = None

    # layers ------------------------------------------------------------------------------
    def take(self, name: str, label: str) -> Shape | None:
        """The global input shape of layer ``name``'s next call, or ``None`` outside a trace.

        Raises:
            ValueError: If the layer is called more often than in the traced forward pass
                (the model's control flow depends on the data).
        """
        if self.current is None:
            return None
        shapes = self.current[0].get(name, [])
        call = self.calls[name]
        if call >= len(shapes):
            raise ValueError(
                f"{label}: call {call + 1} of this layer in one forward pass, but the "
                f"single-device model traced on the meta device calls it {len(shapes)} times; "
                f"a parallel model's layers must be called as the traced model calls them"
            )
        self.calls[name] = call + 1
        return shapes[call]

    def output(
        self, name: str, input_shape: Shape | None, dtype: torch.dtype | None = None
    ) -> Shape | None:
        """The global output shape of layer ``name``'s latest call.

        From the trace; without one, from the single-device layer alone on the
        meta device for its global ``input_shape`` of ``dtype`` (``None`` if the
        shape is unknown).
        """
        if self.current is not None:
            return self.current[2].get(name, [])[self.calls[name] - 1]
        if input_shape is None:
            return None
        layer = self.meta.get_submodule(name)
        (meta,) = _one_sample([torch.empty(input_shape, dtype=dtype, device="meta")])
        with torch.no_grad():
            output = layer(meta)
        if not isinstance(output, torch.Tensor):
            return None
        return _no_sample(tuple(output.shape)) if input_shape[0] == 0 else tuple(output.shape)


def _empty_batch(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() == 5 and value.shape[0] == 0


def _one_sample(values: Any) -> list[Any]:
    """``values`` with each empty 5-D batch made one sample.

    Torch's meta kernels refuse some empty batches (``upsample_nearest3d``); the
    layers' shapes do not depend on the batch size, so the trace runs on one
    sample and :func:`_no_sample` gives the shapes back their empty batch.
    """
    return [
        torch.empty((1, *v.shape[1:]), dtype=v.dtype, device="meta") if _empty_batch(v) else v
        for v in values
    ]


@overload
def _no_sample(shape: Shape) -> Shape: ...
@overload
def _no_sample(shape: None) -> None: ...
def _no_sample(shape: Shape | None) -> Shape | None:
    """A 5-D shape traced on one sample, with its empty batch back."""
    return (0, *shape[1:]) if shape is not None and len(shape) == 5 else shape


def _split_shape(value: Any, meta: Any) -> Shape | None:
    """The global shape of a split model input (a 5-D block not tagged replicated), else None."""
    if is_split_volume(value):
        return tuple(meta.shape)
    return None


def _tensors(output: Any) -> list[torch.Tensor | None]:
    """The tensor of a model output, or each item of a tuple or list (``None`` if not a tensor)."""
    items = output if isinstance(output, tuple | list) else [output]
    return [item if isinstance(item, torch.Tensor) else None for item in items]
