"""The base of every spatially parallel layer: mesh, messages, local/global bookkeeping."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Self

import torch
from torch import nn

from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.partition import DIM_NAMES

REPLICATED_TAG = "_sciml_replicated"


def triple(value: int | Iterable[int]) -> tuple[int, int, int]:
    """``value`` for each of the three spatial dimensions (an int is repeated)."""
    if isinstance(value, int):
        return (value, value, value)
    first, second, third = (int(v) for v in value)
    return (first, second, third)


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
    def from_module(cls, module: nn.Module, mesh: SpatialMesh, *, name: str = "") -> Self:
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
