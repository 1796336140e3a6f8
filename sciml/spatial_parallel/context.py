"""What the rest of the package reads of a parallel model: its context, and what is replicated.

:func:`~sciml.spatial_parallel.parallelize` attaches one :class:`ParallelContext`
(the mesh, the gradient reduction and the split blocks' shared context) to the
model it returns, in one place: the registry of this module, keyed weakly by the
model, so nothing is added to the model's ``__dict__`` and its ``state_dict``
stays the original model's. :func:`parallel_context` finds it again, through a
``DistributedDataParallel`` wrapper (``.module``) or a ``torch.compile`` one
(``._orig_mod``).

A tensor is *replicated* when it holds the same value on every spatial rank of
its replica (after global pooling, or a reduction over every split dim), and a
*split* volume when it is this rank's block of an ``(N, C, D, H, W)`` volume.
:func:`is_replicated` is the one answer to which it is; the layers, the split
blocks, the loss, the gradient reduction and the training step all ask it.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from sciml.spatial_parallel.grad_sync import GradientSync
    from sciml.spatial_parallel.mesh import SpatialMesh
    from sciml.spatial_parallel.split.tensor import SplitContext

#: The attribute that tags a plain tensor (and every ``ReplicatedTensor``) as replicated.
REPLICATED_TAG = "_sciml_replicated"


def mark_replicated(x: torch.Tensor) -> torch.Tensor:
    """Tag ``x`` as identical on every spatial rank of its replica."""
    setattr(x, REPLICATED_TAG, True)
    return x


def is_replicated(x: object) -> bool:
    """Whether ``x`` is a tensor with the same value on every spatial rank (not a split block)."""
    return isinstance(x, torch.Tensor) and bool(getattr(x, REPLICATED_TAG, False))


def is_split_volume(x: object) -> bool:
    """Whether ``x`` is a 5-D tensor that is not replicated: this rank's block of a volume."""
    return isinstance(x, torch.Tensor) and x.dim() == 5 and not is_replicated(x)


def output_tensors(output: object) -> list[torch.Tensor]:
    """The tensors of a model output: itself, or those in its list, tuple or dict values."""
    if isinstance(output, torch.Tensor):
        return [output]
    values: Any = list(output.values()) if isinstance(output, Mapping) else output
    if not isinstance(values, list | tuple):
        return []
    return [value for value in values if isinstance(value, torch.Tensor)]


@dataclass(frozen=True)
class ParallelContext:
    """What :func:`~sciml.spatial_parallel.parallelize` made a parallel model with.

    Args:
        mesh: The process grid the model is split over.
        grad_sync: The reduction of its gradients after each backward pass
            (set ``grad_sync.enabled = False`` to keep local gradients).
        split: What its split blocks share (``split.enabled = False`` hands the
            model's forward code plain blocks, to measure what wrapping costs).
    """

    mesh: SpatialMesh
    grad_sync: GradientSync
    split: SplitContext


#: The one place a parallel model's context is kept: by model, dropped with it.
_CONTEXTS: weakref.WeakKeyDictionary[nn.Module, ParallelContext] = weakref.WeakKeyDictionary()

#: Attributes under which a wrapper keeps the model it wraps: ``torch.compile``, DDP.
_WRAPPED = ("_orig_mod", "module")


def attach(model: nn.Module, context: ParallelContext) -> None:
    """Record ``context`` as the parallel context of ``model`` (by :func:`parallelize` only)."""
    _CONTEXTS[model] = context


def parallel_context(model: object) -> ParallelContext | None:
    """The context of a model made by :func:`~sciml.spatial_parallel.parallelize`, else ``None``.

    Wrappers that keep the model as ``._orig_mod`` (``torch.compile``) or
    ``.module`` (``DistributedDataParallel``) are looked through, nested too.
    """
    seen: set[int] = set()
    while isinstance(model, nn.Module) and id(model) not in seen:
        seen.add(id(model))
        context = _CONTEXTS.get(model)
        if context is not None:
            return context
        model = next(
            (model._modules[name] for name in _WRAPPED if model._modules.get(name) is not None),
            None,
        )
    return None
