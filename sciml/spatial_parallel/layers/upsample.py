"""Spatially parallel 3D upsampling (nearest, nearest-exact, trilinear)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from sciml.spatial_parallel.constants import constant
from sciml.spatial_parallel.halo.autograd import halo_extend
from sciml.spatial_parallel.halo.plan import HaloPlan, build_halo_plan
from sciml.spatial_parallel.layers.base import (
    SpatialLayer,
    empty_connected,
    statistics_dtype,
    triple,
)
from sciml.spatial_parallel.partition import DIM_NAMES, block_bounds, plan_dim


def _source_index(
    out: np.ndarray,
    size: int,
    out_size: int,
    scale: float | None,
    mode: str,
    align_corners: bool,
    dtype: torch.dtype,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Input indices ``i0, i1`` and the weight of ``i1`` for outputs ``out`` (as PyTorch)."""
    real: Any = np.float64 if dtype == torch.float64 else np.float32
    ratio: Any
    if mode == "trilinear" and align_corners:
        ratio = real((size - 1) / (out_size - 1)) if out_size > 1 else real(0)
    elif scale is not None and scale > 0:
        ratio = real(1.0 / scale)
    else:
        ratio = real(size) / real(out_size)
    o: Any = out.astype(real)
    if mode == "nearest":
        if out_size == size:
            i0 = out
        elif out_size == 2 * size:
            i0 = out >> 1
        else:
            i0 = np.minimum(np.floor(o * ratio).astype(np.int64), size - 1)
        return i0, i0, np.zeros(len(out))
    if mode == "nearest-exact":
        i0 = np.minimum(np.floor((o + real(0.5)) * ratio).astype(np.int64), size - 1)
        return i0, i0, np.zeros(len(out))
    src = ratio * o if align_corners else np.maximum(ratio * (o + real(0.5)) - real(0.5), real(0))
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < size - 1)
    return i0, i1, np.clip(src - i0.astype(real), 0, 1).astype(np.float64)


class SpatialUpsample(SpatialLayer, nn.Upsample):
    """:class:`torch.nn.Upsample` on a split volume.

    Modes ``nearest``, ``nearest-exact`` and ``trilinear`` (``align_corners`` either
    way; ``False`` reads a one-voxel halo).
    """

    MODES = ("nearest", "nearest-exact", "trilinear")

    def _check(self) -> None:
        if self.mode not in self.MODES:
            raise ValueError(
                f"{self._label()}: mode={self.mode!r} is not supported on a 3D split volume; "
                f"use one of {self.MODES}"
            )
        if self.align_corners is not None and self.mode != "trilinear":
            raise ValueError(
                f"{self._label()}: align_corners is only for the interpolating mode 'trilinear', "
                f"got mode={self.mode!r}; torch.nn.Upsample rejects it too"
            )
        if (self.size is None) == (self.scale_factor is None):
            raise ValueError(
                f"{self._label()}: give exactly one of size and scale_factor, got size="
                f"{self.size!r}, scale_factor={self.scale_factor!r}"
            )

    def _sizes(self, shape: tuple[int, int, int]) -> list[tuple[int, float | None]]:
        if self.size is not None:
            return [(s, None) for s in triple(self.size)]
        factor = self.scale_factor
        factors = list(factor) if isinstance(factor, tuple | list) else [factor] * 3
        keep = not self.recompute_scale_factor
        return [
            (math.floor(n * float(f)), float(f) if keep else None)  # type: ignore[arg-type]
            for n, f in zip(shape, factors, strict=True)
        ]

    def _plan(self, shape: tuple[int, int, int]) -> tuple[HaloPlan, list[Any]]:
        if shape not in self._plans:
            axes, plans, steps = [], [], []
            align = bool(self.align_corners)
            for k, ((out, scale), size, parts, coord) in enumerate(
                zip(
                    self._sizes(shape), shape, self.mesh.grid, self.mesh.spatial_coords, strict=True
                )
            ):
                needs = []
                for lo, hi in block_bounds(out, parts):
                    i0, i1, _ = _source_index(
                        np.arange(lo, hi), size, out, scale, self.mode, align, torch.float64
                    )
                    needs.append((int(i0.min()), int(i1.max()) + 1) if hi > lo else (0, 0))
                lo, hi = block_bounds(out, parts)[coord]
                steps.append((k + 2, np.arange(lo, hi), size, out, scale, needs[coord][0]))
                if parts > 1:
                    axes.append(k + 2)
                    plans.append(
                        plan_dim(size, parts, out, needs, layer=self._label(), dim=DIM_NAMES[k])
                    )
            self._plans[shape] = (build_halo_plan(self.mesh, tuple(axes), tuple(plans)), steps)
        return self._plans[shape]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Upsample this rank's block to its block of the global output."""
        self._check_input(x)
        halo, steps = self._plan(self._global_shape(x))
        y = halo_extend(x, halo) if halo.axes else x
        if self.mode == "trilinear":  # 16-bit inputs: interpolate in float32, round once
            y = y.to(statistics_dtype(y))
        for axis, out, size, out_size, scale, origin in steps:
            if axis not in halo.axes:
                origin = 0
            if len(out) == 0:
                shape = list(y.shape)
                shape[axis] = 0
                y = empty_connected(y, shape)
                continue
            i0, i1, weight = _source_index(
                out, size, out_size, scale, self.mode, bool(self.align_corners), x.dtype
            )
            first = y.index_select(axis, constant(i0 - origin, device=y.device))
            if self.mode != "trilinear":
                y = first
                continue
            second = y.index_select(axis, constant(i1 - origin, device=y.device))
            shape = [1] * 5
            shape[axis] = len(out)
            lam = constant(weight, dtype=y.dtype, device=y.device).reshape(shape)
            y = first + (second - first) * lam
        return y.to(x.dtype)
