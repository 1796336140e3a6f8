"""Which tensors are replicated: the same value on every spatial rank of their replica.

A tensor is *replicated* after global pooling, or a reduction over every split
dim; a *split volume* is this rank's block of an ``(N, C, D, H, W)`` volume.
:func:`is_replicated` is the one answer to which it is: the layers, the split
blocks, the loss, the gradient reduction and the training step all ask it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

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
