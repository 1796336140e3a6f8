"""The base of every spatially parallel layer: mesh, messages, local/global bookkeeping."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Self

import torch
from torch import nn

from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.partition import DIM_NAMES
from sciml.spatial_parallel.replicated import is_replicated


def triple(value: int | Iterable[int]) -> tuple[int, int, int]:
    """``value`` for each of the three spatial dimensions (an int is repeated)."""
    if isinstance(value, int):
        return (value, value, value)
    first, second, third = (int(v) for v in value)
    return (first, second, third)


def autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The lower dtype of ``torch.autocast`` on ``x``'s device when it is active, else None."""
    device = x.device.type
    if device in ("cpu", "cuda") and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return None


def statistics_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype to accumulate statistics of ``x`` in: float32 for 16-bit floats."""
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


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
    #: Whether it also takes a block laid out otherwise than a volume (channels last,
    #: tokens), acting on unsplit dims alone; its output is then wrapped as its input.
    any_layout: ClassVar[bool] = False
    #: Whether it also takes a whole volume replicated on every spatial rank (a dense
    #: head's); the others get this rank's block of one (an upsampled token grid).
    takes_replicated: ClassVar[bool] = False

    def _setup(self, mesh: SpatialMesh, name: str) -> None:
        self.mesh = mesh
        self.layer_name = name
        self._plans: dict[tuple[int, ...], Any] = {}
        #: The global shape of the current call's input, from the model's shape trace
        #: (set before each call by :func:`~sciml.spatial_parallel.parallelize`), or None.
        self._traced: tuple[int, ...] | None = None
        #: The global shape and ``(dim, mesh axis)`` split of an input block laid out
        #: otherwise than ``(N, C, D, H, W)`` split along D, H, W (channels last, tokens),
        #: from the block itself; else None.
        self._block_layout: tuple[tuple[int, ...], tuple[tuple[int, int], ...]] | None = None

    @classmethod
    def from_module(cls, module: nn.Module, mesh: SpatialMesh, *, name: str = "") -> Self:
        """The parallel layer sharing ``module``'s parameters and buffers."""
        layer = cls.__new__(cls)
        layer.__dict__.update(module.__dict__)
        layer._setup(mesh, name or type(module).__name__)
        layer._check()
        return layer

    def takes_folded(self) -> bool:
        """Whether it takes a block of windows or tokens merged across split dims as it is.

        Layers acting on each window or token alone do (override); the others get
        such a block gathered whole.
        """
        return False

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
        if is_replicated(x):
            raise ValueError(
                f"{self._label()}: received a globally pooled (replicated) tensor; spatially "
                f"split layers must come before global pooling"
            )
        weight = next(self.parameters(recurse=False), None)  # type: ignore[attr-defined]
        autocast = x.dtype == autocast_dtype(x)  # autocast's inputs may be of its lower dtype
        if weight is not None and (
            x.device != weight.device or x.dtype != weight.dtype and not autocast
        ):
            raise ValueError(
                f"{self._label()}: input block is {x.dtype} on {x.device} but the layer's "
                f"parameters are {weight.dtype} on {weight.device}"
            )

    def _global_input(self, x: torch.Tensor) -> tuple[int, ...]:
        """Global ``(N, C, D, H, W)`` of the split block ``x``, checked against its shape.

        From the model's shape trace, without communication; a layer called
        outside its model's forward pass asks the other ranks (one collective).
        """
        shape = self._traced if self._traced is not None else self.mesh.global_shape(x.shape)
        for axis, (size, parts, coord) in enumerate(
            zip(shape[2:], self.mesh.grid, self.mesh.spatial_coords, strict=True)
        ):
            expected = size // parts + (coord < size % parts)
            if x.shape[2 + axis] != expected:
                raise ValueError(
                    f"{self._label()}: the local block has {x.shape[2 + axis]} elements along "
                    f"{DIM_NAMES[axis]} but block {coord} of a global size {size} split over "
                    f"{parts} ranks has {expected}; shard inputs with sciml.spatial_parallel.shard"
                )
        return shape

    def _global_shape(self, x: torch.Tensor) -> tuple[int, int, int]:
        """Global ``(D, H, W)`` of the split block ``x`` (see :meth:`_global_input`)."""
        depth, height, width = self._global_input(x)[2:]
        return depth, height, width

    def _global_batch(self, x: torch.Tensor) -> int:
        """Global batch of ``x`` (split or replicated): traced, else one collective."""
        if self._traced is not None:
            return self._traced[0]
        return self.mesh.global_batch(x.shape[0])
