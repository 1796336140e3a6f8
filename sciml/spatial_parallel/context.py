"""The parallel context of a model: what the rest of the package reads of a parallel model.

:func:`~sciml.spatial_parallel.parallelize` attaches one :class:`ParallelContext`
(the mesh, the gradient reduction and the split blocks' shared context) to the
model it returns, in one place: the registry of this module, keyed weakly by the
model, so nothing is added to the model's ``__dict__`` and its ``state_dict``
stays the original model's. :func:`parallel_context` finds it again, through a
``DistributedDataParallel`` wrapper (``.module``) or a ``torch.compile`` one
(``._orig_mod``).

Whether a tensor is replicated is answered by :mod:`sciml.spatial_parallel.replicated`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from sciml.spatial_parallel.grad_sync import GradientSync
    from sciml.spatial_parallel.mesh import SpatialMesh
    from sciml.spatial_parallel.split.tensor import SplitContext


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
