"""Turn an ordinary 3D CNN into a spatially parallel one."""

from __future__ import annotations

import copy
import math
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from sciml.distributed.collectives import backend_devices
from sciml.spatial_parallel.context import ParallelContext, attach, parallel_context
from sciml.spatial_parallel.grad_sync import GradientSync
from sciml.spatial_parallel.layers.base import SpatialLayer
from sciml.spatial_parallel.layers.table import CONTAINERS, names, supported_spec
from sciml.spatial_parallel.layers.window import WindowLayer
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.shapes import ShapeTrace, meta_copy
from sciml.spatial_parallel.split.crossings import block_of
from sciml.spatial_parallel.split.folded import whole
from sciml.spatial_parallel.split.hooks import (
    VOLUME_SPLIT,
    unwrap_inputs,
    unwrap_outputs,
    wrap_inputs,
    wrap_output,
)
from sciml.spatial_parallel.split.op_names import split_names
from sciml.spatial_parallel.split.tensor import (
    FoldedTensor,
    ReplicatedTensor,
    SplitContext,
    SplitTensor,
    eager,
    unwrap,
    wrap_folded,
    wrap_split,
)


def gradient_sync(model: nn.Module) -> GradientSync:
    """The gradient reduction of a model returned by :func:`parallelize` (its context's).

    Set ``gradient_sync(pmodel).enabled = False`` to keep local gradients.
    """
    context = parallel_context(model)
    if context is None:
        raise ValueError(f"{type(model).__name__} was not made by sciml parallelize()")
    return context.grad_sync


def _dense_guard(name: str, mesh: SpatialMesh) -> Any:
    def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
        if mesh.spatial_size > 1 and args and isinstance(args[0], torch.Tensor):
            x = args[0]
            if x.dim() == 5 or isinstance(x, SplitTensor):
                what = (
                    "(N, C, D, H, W)" if x.dim() == 5 else f"{x.dim()}-D (split along a token dim)"
                )
                raise ValueError(
                    f"parallelize: layer '{name}' ({type(module).__name__}) received a split "
                    f"{what} block; dense layers only work after global pooling or Flatten"
                )

    return hook


def _check_arguments(
    model: object, mesh: object, *, overlap: object, bucket_mb: object, input_shape: object
) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"parallelize expects a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(mesh, SpatialMesh):
        raise TypeError(f"parallelize expects a SpatialMesh, got {type(mesh).__name__}")
    if overlap is not None and not isinstance(overlap, bool):
        raise TypeError(f"parallelize: overlap must be True, False or None, got {overlap!r}")
    if (
        not isinstance(bucket_mb, int | float)
        or isinstance(bucket_mb, bool)
        or not math.isfinite(bucket_mb)
        or bucket_mb <= 0
    ):
        raise ValueError(f"parallelize: bucket_mb must be a finite number > 0, got {bucket_mb!r}")
    if input_shape is not None and not (
        isinstance(input_shape, tuple | list)
        and len(input_shape) == 3
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in input_shape)
    ):
        raise ValueError(
            f"parallelize: input_shape must be the global (D, H, W) of the model input, three "
            f"integers >= 1, got {input_shape!r}"
        )
    if parallel_context(model) is not None:
        raise ValueError(
            "parallelize: the model was already made by parallelize(); parallelize the "
            "original single-device model instead"
        )
    for name, module in model.named_modules():
        if isinstance(module, SpatialLayer) and module.mesh is not mesh:
            raise ValueError(
                f"parallelize: layer '{name}' ({type(module).__name__}) was built for another "
                f"mesh ({module.mesh}); parallelize the single-device model for this mesh"
            )


def _other_layout(module: SpatialLayer, args: tuple[Any, ...]) -> tuple[Any, Any] | None:
    """``(global shape, split)`` of an input block not laid out as a volume, if the layer takes it.

    A block permuted channels last or reshaped to tokens keeps its own split dims
    through the layers that act on unsplit dims alone (``SpatialLayer.any_layout``:
    ``LayerNorm`` over the last dims, ``PReLU``): their output is wrapped as their input.

    Raises:
        ValueError: If another split layer (a convolution, a pool) gets such a block.
    """
    x = args[0] if args else None
    if not isinstance(x, SplitTensor):
        return None
    if len(x._gshape) == 5 and all(d == a + 2 for d, a in x._split):  # a volume
        return None
    if not module.any_layout:
        raise ValueError(
            f"{module._label()}: received a block of the global {x._gshape} split along "
            f"{split_names(x._split)}, not an (N, C, D, H, W) volume split along D, H, W; "
            f"permute it back to (N, C, D, H, W) before this layer"
        )
    return x._gshape, x._split


#: A folded block's layout: global shape, merged dim, its factors and their split.
Folding = tuple[tuple[int, ...], int, tuple[int, ...], tuple[tuple[int, int], ...]]


def _folding(module: SpatialLayer, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
    """``args`` with a folded block gathered whole unless the layer takes it; its layout."""
    x = args[0] if args else None
    if not isinstance(x, FoldedTensor):
        return args, None
    if not module.takes_folded():
        return (whole(x), *args[1:]), None
    return args, (x._gshape, x._dim, x._factors, x._fsplit)


def _block_of_replicated(
    module: SpatialLayer, args: tuple[Any, ...], ctx: SplitContext
) -> tuple[Any, ...]:
    """``args`` with a replicated volume replaced by this rank's block, if the layer splits it.

    A token grid a transformer computed on every rank, reshaped back to a volume,
    enters the split layers after it as the blocks of a sharded input would.
    """
    x = args[0] if args else None
    if not isinstance(x, ReplicatedTensor) or module.takes_replicated:
        return args
    shape = tuple(unwrap(x).shape)
    if len(shape) != 5:
        return args
    return (wrap_split(block_of(x, ctx, VOLUME_SPLIT), ctx, shape, VOLUME_SPLIT), *args[1:])


def _trace_shapes(
    model: nn.Module, original: nn.Module, ctx: SplitContext, input_shape: Any
) -> ShapeTrace:
    """Attach a :class:`ShapeTrace` of ``original`` to ``model`` and its split layers.

    The model's split inputs enter as :class:`SplitTensor` blocks and its
    outputs leave as plain tensors; each split layer takes plain tensors and
    gives wrapped ones (:mod:`sciml.spatial_parallel.split.tensor`).
    """
    names = [name for name, m in model.named_modules() if isinstance(m, SpatialLayer)]
    shape = None if input_shape is None else tuple(input_shape)
    trace = ShapeTrace(meta_copy(original), names, ctx.mesh, input_shape=shape)
    layouts: dict[str, tuple[Any, Any] | None] = {}
    foldings: dict[str, Folding | None] = {}

    @eager
    def enter(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        trace.begin(module, args, kwargs)
        return wrap_inputs(args, kwargs, trace.entry, ctx) if ctx.enabled else None

    @eager
    def leave(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        output = unwrap_outputs(output)
        trace.end(output)
        return output

    model.register_forward_pre_hook(enter, with_kwargs=True)
    model.register_forward_hook(leave, always_call=True)
    for name in names:
        layer = model.get_submodule(name)

        @eager
        def take(module: nn.Module, args: tuple[Any, ...], name: str = name) -> Any:
            assert isinstance(module, SpatialLayer)
            traced = trace.take(name, module._label())
            if traced is None and ctx.mesh.data == 1 and args and isinstance(args[0], SplitTensor):
                traced = args[0]._gshape  # untraced: the block knows its global shape
            module._traced = traced
            args, folding = _folding(module, args)
            foldings[name] = folding
            args = _block_of_replicated(module, args, ctx)
            if folding is None:
                layout = layouts[name] = _other_layout(module, args)
            else:  # the merged dim counts as a split one in the layer's checks
                shape, dim, _, fsplit = folding
                layout = layouts[name] = (shape, ((dim, fsplit[0][1]),))
            module._block_layout = layout
            return unwrap_inputs(args)

        @eager
        def give(module: nn.Module, args: tuple[Any, ...], output: Any, name: str = name) -> Any:
            if not (trace.inside and ctx.enabled):  # called on its own: plain in, plain out
                return output
            assert isinstance(module, SpatialLayer)
            layout, folding = layouts[name], foldings[name]
            if folding is not None:  # windows or tokens merged across split dims
                shape, dim, factors, fsplit = folding
                sizes = zip(shape, output.shape, strict=True)
                merged = tuple(g if d == dim else o for d, (g, o) in enumerate(sizes))
                return wrap_folded(output, ctx, merged, dim, factors, fsplit)
            if layout is not None:  # channels last, tokens: the block's own layout
                shape, split = layout
                split_dims = {dim for dim, _ in split}
                # unsplit dims are whole on every rank (a Linear changes the last one)
                gout = [
                    g if d in split_dims else o
                    for d, (g, o) in enumerate(zip(shape, output.shape, strict=True))
                ]
                return wrap_split(output, ctx, tuple(gout), split)
            dtype = args[0].dtype if args and isinstance(args[0], torch.Tensor) else None
            return wrap_output(output, trace.output(name, module._traced, dtype), ctx)

        layer.register_forward_pre_hook(take)
        layer.register_forward_hook(give)
    return trace


def _place(model: nn.Module, device: torch.device | str | None) -> None:
    """Move ``model`` to ``device``, then check that the process group can broadcast it.

    Raises:
        ValueError: If the tensors sit on several devices, on a device type the
            group's backend does not take, or (NCCL) on another GPU than this rank's.
    """
    if device is not None:
        model.to(device)
    tensors = [*model.named_parameters(), *model.named_buffers()]
    devices = {tensor.device for _, tensor in tensors}
    if len(devices) > 1:
        where = {str(t.device): name for name, t in tensors}
        raise ValueError(
            f"parallelize: the model's parameters and buffers sit on several devices "
            f"({where}); pass device= to put them on one"
        )
    if not devices:
        return
    (found,) = devices
    takes = backend_devices()
    if found.type not in takes:
        raise ValueError(
            f"parallelize: the model's parameters are on {found} but the process group "
            f"({dist.get_backend_config()}) takes only {sorted(takes)} tensors; pass "
            f"device=... (e.g. torch.device('cuda', torch.cuda.current_device()))"
        )
    if found.type == "cuda" and "cuda:nccl" in dist.get_backend_config():
        mine = torch.device("cuda", torch.cuda.current_device())
        if found != mine:
            raise ValueError(
                f"parallelize: the model's parameters are on {found} but this rank's GPU "
                f"is {mine} (NCCL sends from the current device); pass device={str(mine)!r}"
            )


def parallelize(
    model: nn.Module,
    mesh: SpatialMesh,
    *,
    overlap: bool | None = None,
    bucket_mb: float = 25.0,
    device: torch.device | str | None = None,
    input_shape: tuple[int, int, int] | None = None,
) -> nn.Module:
    """A spatially parallel copy of ``model`` for ``mesh``.

    Swaps the layers of the table :data:`~sciml.spatial_parallel.layers.table.LAYERS`
    for their split classes (subclasses of the layers they replace, so parameter
    names and ``state_dict`` keys are unchanged), keeps elementwise layers, and
    lets dense layers run on the replicated tensor after global pooling. Parameters and buffers are
    broadcast from rank 0 so that every rank starts from the same model;
    ``model`` itself is not modified.

    After ``backward()`` every parameter's ``.grad`` is the single-device
    gradient of the global loss, averaged over the data-parallel replicas
    (see :mod:`sciml.spatial_parallel.grad_sync` and :func:`gradient_sync`).
    The returned model's mesh, gradient reduction and split context are its
    :func:`~sciml.spatial_parallel.context.parallel_context`.

    Args:
        model: A plain ``torch.nn`` 3D CNN (e.g. ``sciml.models.UNet(dims=3)``).
        mesh: The process grid.
        overlap: Compute convolution and pooling interiors while halos travel
            (``None``: on CUDA tensors only; on CPU the thin boundary convolutions
            cost more than the gloo halo time they hide, see the benchmarks).
        bucket_mb: Size of the gradient all-reduce buckets, in MiB.
        device: Where the parallel model lives (its parameters are moved there
            before rank 0's values are broadcast); ``None`` keeps the model
            where it is, which must then be a device the process group takes
            (this rank's GPU under NCCL).
        input_shape: The global ``(D, H, W)`` of the model input, for inputs that
            are not :func:`~sciml.spatial_parallel.shard` results (which carry
            their global shape). Without either, each forward pass starts with
            one small all-reduce to find it (:mod:`sciml.spatial_parallel.shapes`).

    Raises:
        ValueError: Naming the first layer that cannot be split in space, or a
            layer configuration that is not supported; if ``model`` was already
            parallelised, ``bucket_mb`` is not positive or ``input_shape`` is not
            three positive sizes; if the parameters sit on several devices or on
            one the process group cannot broadcast from.
        TypeError: If ``model`` or ``mesh`` has the wrong type.

    Examples:
        Run on every rank (here a world of one, so the block is the whole volume):

        >>> import torch
        >>> from sciml.distributed import init_distributed
        >>> from sciml.spatial_parallel import SpatialMesh, shard, unshard
        >>> model = torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.ReLU())
        >>> x = torch.randn(2, 1, 8, 8, 8)
        >>> with init_distributed():
        ...     mesh = SpatialMesh(depth=1)
        ...     y = unshard(parallelize(model, mesh)(shard(x, mesh)), mesh)
        >>> torch.allclose(y, model(x))
        True
    """
    _check_arguments(model, mesh, overlap=overlap, bucket_mb=bucket_mb, input_shape=input_shape)
    original, model = model, copy.deepcopy(model)
    replicated: set[str] = set()

    converted: dict[int, nn.Module] = {}

    def convert(module: nn.Module, prefix: str) -> nn.Module:
        """``module`` split, once: a module shared by two names stays shared (MONAI's MLP)."""
        if id(module) not in converted:
            converted[id(module)] = convert_once(module, prefix)
        return converted[id(module)]

    def convert_once(module: nn.Module, prefix: str) -> nn.Module:
        name = prefix or type(module).__name__
        kind = type(module)
        if isinstance(module, SpatialLayer):
            return module
        spec = supported_spec(module, name)
        if spec is not None and spec.parallel is not None:
            layer = spec.parallel.from_module(module, mesh, name=name)
            if spec.overlap:
                assert isinstance(layer, WindowLayer)
                layer.overlap = overlap
            return cast(nn.Module, layer)
        if spec is not None and spec.role == "dense":
            replicated.add(prefix)
            module.register_forward_pre_hook(_dense_guard(name, mesh))
            return module
        if spec is not None:  # elementwise, or functional: the split blocks run its ops
            return module
        # every name, a module shared by two included (named_children() gives it once)
        children = [(n, m) for n, m in module._modules.items() if m is not None]
        if (
            not children
            and not isinstance(module, CONTAINERS)
            and (list(module.parameters(recurse=False)) or kind.__module__.startswith("torch.nn"))
        ):
            raise ValueError(
                f"parallelize: layer '{name}' ({kind.__name__}) cannot be split in space. "
                f"Supported: {names('swap')}, elementwise activations, "
                f"{names('functional')} (their torch ops on the blocks), and "
                f"{names('dense')} after global pooling"
            )
        for child, sub in children:
            setattr(module, child, convert(sub, f"{prefix}.{child}" if prefix else child))
        return module

    model = convert(model, "")
    _place(model, device)
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if dist.get_world_size() > 1:
                dist.broadcast(tensor, src=0)
    params = [(p, name.rpartition(".")[0] in replicated) for name, p in model.named_parameters()]
    split = SplitContext(mesh, frozenset(id(p) for p, dense in params if dense))
    _trace_shapes(model, original, split, input_shape)
    sync = GradientSync(params, mesh, bucket_mb=bucket_mb)
    attach(model, ParallelContext(mesh=mesh, grad_sync=sync, split=split))
    model.register_forward_hook(eager(lambda module, args, output: sync.watch(output)))
    return model
