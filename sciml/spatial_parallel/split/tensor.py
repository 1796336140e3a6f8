"""Tensors that know they are split: every torch op on a block is global or refused.

A parallel model (:func:`~sciml.spatial_parallel.parallelize`) wraps its
split inputs in :class:`SplitTensor`: this rank's block of a global tensor,
carrying the global shape and which tensor dims the mesh splits. The model's
own forward code then sees the global tensor through it:

- ``shape``, ``size()``, ``numel()`` answer the global extent, so code that
  branches on shapes takes the same branch on every rank;
- pointwise ops and ops along unsplit dims run on the block as they are;
- reductions, pads, concatenations, slices, reshapes and ``interpolate``
  along split dims are computed globally (:mod:`.ops`, :mod:`.layout`,
  :mod:`.pad`, :mod:`.resample`; the op tables of :mod:`.dispatch`);
- every other op that touches a split dim raises a :class:`SplitOpError`
  naming the op, the split dims and the calling line.

A reshape that merges split dims (tokens or windows across depth and height)
gives a :class:`FoldedTensor`: each rank's whole tokens or windows, merged in
order (:mod:`.folded`). A reduction over every split dim gives a
:class:`ReplicatedTensor`: the same value on every spatial rank. Gradients follow the package's loss
conventions: a replicated tensor's gradient is the whole gradient on every
rank, so where it meets a split block the gradients of the split use are
summed over the spatial group, and where it meets a tensor whose gradient the
parallel model sums over the spatial group (a parameter outside the dense
layers), that gradient is divided by the group size (:mod:`.crossings`).

Swapped layers and the model's exit see plain tensors (:func:`unwrap`).

Under ``torch.compile`` the compiler never traces a wrapped tensor: every op
on one (and every read of its shape) is a graph break that runs eagerly as
above, so compiled code never sees a block's local extent where the model's
code asks for the global one; the split layers' local compute, on plain
tensors, is compiled between those breaks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch._dynamo
import torch.distributed as dist

from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.partition import DIM_NAMES, block_bounds
from sciml.spatial_parallel.replicated import REPLICATED_TAG, mark_replicated
from sciml.spatial_parallel.split.op_names import refuse, split_names

Shape = tuple[int, ...]
#: ``(tensor dim, mesh spatial axis)`` pairs of the split dims, by increasing dim.
Split = tuple[tuple[int, int], ...]
Handler = Callable[["SplitContext", Any, tuple[Any, ...], dict[str, Any]], Any]
#: Process groups whose collectives, one after another, span some mesh axes.
Groups = tuple[dist.ProcessGroup, ...]


_handle: Callable[..., Any] | None = None


@dataclass(eq=False)
class SplitContext:
    """What every wrapped tensor of one parallel model shares.

    Args:
        mesh: The process grid.
        averaged: ``id`` of the parameters whose gradients the parallel model
            averages (not sums) over the spatial group: those of the dense layers.
        enabled: Whether the model wraps its blocks; ``False`` gives the model's
            forward code plain blocks (this rank's values only, local shapes), to
            measure what the wrapping costs.
    """

    mesh: SpatialMesh
    averaged: frozenset[int] = field(default_factory=frozenset)
    enabled: bool = True
    _local_shapes: dict[tuple[Shape, Split], Shape] = field(default_factory=dict, repr=False)
    #: Split layers the blocks' functional ops run through (trilinear ``interpolate``), by options.
    helpers: dict[Any, Any] = field(default_factory=dict, repr=False)

    def bounds(self, size: int, axis: int) -> tuple[int, int]:
        """This rank's ``[lo, hi)`` of a global ``size`` split along mesh ``axis``."""
        return block_bounds(size, self.mesh.grid[axis])[self.mesh.spatial_coords[axis]]

    def local_shape(self, shape: Shape, split: Split) -> Shape:
        """This rank's block shape of a global ``shape`` split as ``split`` (cached)."""
        key = (shape, split)
        local = self._local_shapes.get(key)
        if local is None:
            sizes = list(shape)
            for dim, axis in split:
                lo, hi = self.bounds(shape[dim], axis)
                sizes[dim] = hi - lo
            local = self._local_shapes[key] = tuple(sizes)
        return local

    def groups(self, axes: Sequence[int]) -> Groups:
        """The groups spanning the ranks along mesh ``axes``: the spatial group if that is all."""
        if {a for a in range(len(self.mesh.grid)) if self.mesh.grid[a] > 1} <= set(axes):
            return (self.mesh.spatial_group,)
        return tuple(self.mesh.dim_groups[a] for a in axes if self.mesh.grid[a] > 1)


def first_split(func: Any, args: Sequence[Any], kwargs: dict[str, Any] | None = None) -> Any:
    """``args[0]``, the split block ``func`` acts on; refused if a split block is only an option.

    Raises:
        SplitOpError: If the first argument is not split (``plain.view_as(block)``,
            ``plain[block]``), naming the op and the split block's dims.
    """
    first = args[0] if args else None
    if isinstance(first, SplitTensor):
        return first
    values = (*args, *(kwargs or {}).values())
    split = next(t for t in tensors_in(values) if isinstance(t, SplitTensor))
    held = "a plain tensor" if isinstance(first, torch.Tensor) else type(first).__name__
    raise refuse(
        func,
        split._split,
        f"it acts on {held} and takes the split block only as an argument, which has no "
        f"global meaning there; unshard() the block first, or shard the other tensor too",
    )


#: Why the compiler stops at split blocks (what ``torch.compile(..., fullgraph=True)`` reports).
EAGER_REASON = (
    "sciml spatial_parallel: split blocks, and the parallel model's hooks that wrap them, run "
    "eagerly between compiled graphs; compile a parallel model without fullgraph=True"
)


def eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run eagerly under ``torch.compile``, a graph break that names :data:`EAGER_REASON`."""
    return torch.compiler.disable(fn, reason=EAGER_REASON)


#: Tensor attributes whose value on a wrapped tensor is not that of its plain block.
LAYOUT_ATTRIBUTES = ("shape", "data", "T", "mT", "H", "mH", "real", "imag")
_BLOCK_SHAPE: Any = torch._C.TensorBase.shape  # the C-level attribute, not the property below


def _eager_attribute(name: str) -> property:
    """``Tensor.<name>`` read and written through ``__torch_function__``, outside compiled graphs.

    ``torch.compile`` reads tensor attributes of the tensors it does not trace
    straight from the C level: for a split block that is the block's own shape
    (or view), so a graph would branch on, and guard on, the local block's
    extent. As a Python property the compiler calls it instead, eagerly.
    """
    getset = getattr(torch._C.TensorBase, name)

    @eager
    def get(self: torch.Tensor) -> Any:
        return getset.__get__(self)

    @eager
    def put(self: torch.Tensor, value: Any) -> None:
        getset.__set__(self, value)

    return property(get, put, doc=getset.__doc__)


class _Dispatched(torch.Tensor):
    """A tensor whose torch ops go through the split-op tables (:func:`dispatch`).

    Under ``torch.compile`` every op on it is a graph break that runs eagerly
    through :func:`dispatch` (the compiler models these tensors as opaque
    objects: ``torch._dynamo.config.nontraceable_tensor_subclasses``); the plain
    tensors inside the split layers are compiled.
    """

    @classmethod
    @eager
    def __torch_function__(
        cls,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Run ``func`` as on the global tensor (results keep their kind), or raise naming it."""
        with torch._C.DisableTorchFunctionSubclass():
            return dispatch(func, tuple(args), kwargs or {})


for _name in LAYOUT_ATTRIBUTES:
    setattr(_Dispatched, _name, _eager_attribute(_name))


class SplitTensor(_Dispatched):
    """This rank's block of a global tensor split over the spatial mesh (see the module)."""

    _ctx: SplitContext
    _gshape: Shape
    _split: Split
    _block: torch.Tensor  # the plain tensor this block is an alias of (see write_target)

    def __repr__(self, *, tensor_contents: Any = None) -> Any:  # type: ignore[override]
        """The global shape and the split dims (the values are this rank's only)."""
        return _described(self, f"split along {split_names(self._split)}")


class ReplicatedTensor(_Dispatched):
    """A tensor with the same value on every spatial rank, made from split blocks."""

    _ctx: SplitContext


setattr(ReplicatedTensor, REPLICATED_TAG, True)  # every instance answers is_replicated


class FoldedTensor(_Dispatched):
    """This rank's block of a global tensor whose dim ``_dim`` merges dims split on the mesh.

    The global dim ``_dim`` is the row-major merge of dims of sizes ``_factors``, of
    which those in ``_fsplit`` (``(factor, mesh axis)`` pairs) are split: Swin's window
    batch or ViT's tokens on a depth x height split. The block holds every rank's
    whole windows or tokens, merged in the same order (:mod:`.folded`).
    """

    _ctx: SplitContext
    _gshape: Shape
    _dim: int
    _factors: Shape
    _fsplit: Split
    _block: torch.Tensor

    def __repr__(self, *, tensor_contents: Any = None) -> Any:  # type: ignore[override]
        """The global shape and the merged dim (the values are this rank's only)."""
        split = ", ".join(f"factor {f} along {DIM_NAMES[a]}" for f, a in self._fsplit)
        return _described(self, f"dim {self._dim} merges {self._factors} ({split})")


def _described(x: torch.Tensor, layout: str) -> str:
    """``Kind(global shape ..., <layout>, local block ..., dtype=...)``."""
    with torch._C.DisableTorchFunctionSubclass():
        local = tuple(x.shape)
    shape = x._gshape  # type: ignore[attr-defined]
    return (
        f"{type(x).__name__}(global shape {shape}, {layout}, local block {local}, dtype={x.dtype})"
    )


torch._dynamo.config.nontraceable_tensor_subclasses.update(
    {SplitTensor, ReplicatedTensor, FoldedTensor}
)


def wrap_split(x: torch.Tensor, ctx: SplitContext, shape: Shape, split: Split) -> torch.Tensor:
    """``x``, this rank's block of a global ``shape`` split as ``split``, as a SplitTensor.

    With nothing split (an unsplit mesh, or dims of global size 1) ``x`` stays plain.
    """
    split = tuple((d, a) for d, a in split if ctx.mesh.grid[a] > 1)
    if not split:
        return x
    with torch._C.DisableTorchFunctionSubclass():
        out = x.as_subclass(SplitTensor)
    out._ctx, out._gshape, out._split, out._block = ctx, tuple(shape), split, x
    return out


def wrap_folded(
    x: torch.Tensor, ctx: SplitContext, shape: Shape, dim: int, factors: Shape, fsplit: Split
) -> torch.Tensor:
    """``x``, this rank's block of a global ``shape`` whose ``dim`` merges split ``factors``.

    With no factor split (an unsplit mesh) ``x`` stays plain.
    """
    fsplit = tuple((f, a) for f, a in fsplit if ctx.mesh.grid[a] > 1)
    if not fsplit:
        return x
    with torch._C.DisableTorchFunctionSubclass():
        out = x.as_subclass(FoldedTensor)
    out._ctx, out._gshape, out._dim, out._block = ctx, tuple(shape), dim, x
    out._factors, out._fsplit = tuple(factors), tuple(fsplit)
    return out


def wrap_replicated(x: torch.Tensor, ctx: SplitContext) -> torch.Tensor:
    """``x``, the same on every spatial rank, as a ReplicatedTensor."""
    with torch._C.DisableTorchFunctionSubclass():
        out = x.as_subclass(ReplicatedTensor)
    out._ctx = ctx
    return out


def unwrap(x: Any) -> Any:
    """The plain tensor of a wrapped one (a replicated one keeps its tag); others as they are."""
    if isinstance(x, SplitTensor | ReplicatedTensor | FoldedTensor):
        with torch._C.DisableTorchFunctionSubclass():
            plain = x.as_subclass(torch.Tensor)
        return mark_replicated(plain) if isinstance(x, ReplicatedTensor) else plain
    return x


def write_target(x: SplitTensor) -> torch.Tensor:
    """The plain tensor that an in-place op on the block ``x`` writes into.

    ``x`` is an autograd alias of the plain tensor it wraps. Written through a
    new alias of it, an in-place op would cost autograd a copy of the whole
    block (the view's ``CopySlices`` and ``AsStridedBackward``) that the same
    op on one tensor does not; written into the wrapped tensor itself, it
    costs what it costs there (the stale ``x`` sees the new values and
    rebuilds its gradient edge if it is used again).
    """
    return x._block


def tensors_in(values: Sequence[Any]) -> list[torch.Tensor]:
    """The tensors among ``values`` and inside their lists and tuples."""
    found: list[torch.Tensor] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, list | tuple):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def map_tensors(values: Sequence[Any], fn: Callable[[torch.Tensor], Any]) -> tuple[Any, ...]:
    """``values`` with ``fn`` applied to each tensor (also inside lists and tuples)."""
    out: list[Any] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            out.append(fn(value))
        elif isinstance(value, list | tuple):
            out.append(type(value)(fn(v) if isinstance(v, torch.Tensor) else v for v in value))
        else:
            out.append(value)
    return tuple(out)


def new_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Shape, tuple[Any, ...], dict[str, Any]]:
    """A ``new_zeros``/``new_full`` call's size (as a list or varargs), its other arguments."""
    kwargs = dict(kwargs)
    size = args[1] if len(args) > 1 else kwargs.pop("size")
    sized = isinstance(size, Sequence)
    rest = args[2:] if len(args) > 1 and sized else ()
    return (tuple(size) if sized else tuple(args[1:])), rest, kwargs


def local_shape(x: torch.Tensor) -> Shape:
    """The shape of ``x``'s block on this rank."""
    with torch._C.DisableTorchFunctionSubclass():
        return tuple(_BLOCK_SHAPE.__get__(x))


def global_numel(x: SplitTensor) -> int:
    """Elements of the global tensor of ``x``."""
    return math.prod(x._gshape)


def set_handler(handle: Callable[..., Any]) -> None:
    """Register the function that runs a torch op on split blocks (the op tables' entry).

    It takes ``(func, first split argument or None, args, kwargs)``.
    :mod:`sciml.spatial_parallel.split.dispatch` registers its ``handle`` when imported
    (the package imports it), so that this module needs none of the op tables.
    """
    global _handle
    _handle = handle


def dispatch(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``func`` on wrapped tensors (called with torch functions of subclasses disabled)."""
    if _handle is None:
        raise RuntimeError(
            "no split-op handler is registered: import sciml.spatial_parallel.split "
            "(its dispatch module registers one)"
        )
    if not kwargs and len(args) == 1 and isinstance(args[0], SplitTensor):  # the common case
        return _handle(func, args[0], args, kwargs)
    every = tensors_in(args) + tensors_in(tuple(kwargs.values()))
    folded = (t for t in every if isinstance(t, FoldedTensor))  # folded ones first
    split = next(folded, next((t for t in every if isinstance(t, SplitTensor)), None))
    return _handle(func, split, args, kwargs)  # None: replicated tensors only


def _meta_of(x: Any) -> Any:
    """``x`` with every tensor a meta tensor of its global shape (in lists and tuples too)."""
    if isinstance(x, SplitTensor | FoldedTensor):
        return torch.empty(x._gshape, dtype=x.dtype, device="meta")
    if isinstance(x, torch.Tensor):
        return torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
    if isinstance(x, list | tuple):
        return type(x)(_meta_of(v) for v in x)
    return x


def global_result(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func`` on meta tensors of the global shapes (the global result's shapes)."""
    return func(*_meta_of(args), **{k: _meta_of(v) for k, v in kwargs.items()})
