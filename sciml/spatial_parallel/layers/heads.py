"""Layers at the boundary between split volumes and replicated dense heads.

:class:`SpatialAdaptiveAvgPool3d` reduces a split volume to a tensor that is
the same on every spatial rank; :class:`SpatialFlatten` flattens it (or
gathers a still-split volume first, for a flatten head); dense layers then run
replicated. Each rank's loss on a replicated output *is* the global loss, so
these reductions pass gradients straight through and the parameters of the
replicated layers are averaged, not summed, over the spatial group.

:class:`SpatialPReLU` and :class:`SpatialLayerNorm` run on either side of that
boundary: on a split block their parameter gradients are the block's share
(summed over the spatial group), on a replicated tensor each rank holds the
whole gradient, which they divide by the spatial group's size before the sum.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sciml.spatial_parallel.halo.collectives import gather_replicated, replicated_sum
from sciml.spatial_parallel.layers.adaptive import adaptive_avg_pool, adaptive_max_pool
from sciml.spatial_parallel.layers.base import SpatialLayer
from sciml.spatial_parallel.partition import block_bounds
from sciml.spatial_parallel.replicated import is_replicated, is_split_volume, mark_replicated


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.scale, None


def _shared(param: torch.Tensor | None, spatial: int) -> torch.Tensor | None:
    """``param`` as used on a replicated tensor: its gradient divided by ``spatial``.

    Every spatial rank computes the whole gradient of such a use, and the
    gradient reduction sums the parameters of split layers over the group.
    """
    if param is None or spatial == 1:
        return param
    return _ScaleGrad.apply(param, 1.0 / spatial)


class _EitherSide(SpatialLayer):
    """A layer that runs on split blocks and on replicated tensors alike."""

    any_layout = True
    takes_replicated = True

    def takes_folded(self) -> bool:
        """Yes: it acts along unsplit dims alone (refusing the merged dim as a split one)."""
        return True

    def _split_dims(self, x: torch.Tensor) -> set[int] | None:
        """The dims (after the batch) along which ``x`` is a block of a larger tensor.

        From the block's own layout when it is not a volume's, else from the model's
        shape trace; ``None`` outside a traced forward pass.
        """
        if self._block_layout is not None:
            return {dim for dim, _ in self._block_layout[1]}
        if self._traced is None:
            return None
        if len(self._traced) != x.dim():
            raise ValueError(
                f"{self._label()}: input of shape {tuple(x.shape)} where the single-device "
                f"model traced a {len(self._traced)}-D input {self._traced}"
            )
        return {d for d in range(1, x.dim()) if x.shape[d] != self._traced[d]}

    def _sides(self, x: torch.Tensor, local: set[int], what: str) -> tuple[bool, set[int] | None]:
        """Whether ``x`` is a split block, and its split dims; refuses a split in ``local``.

        A 5-D tensor that global pooling did not mark is a split block (as for
        every split layer); any other tensor is split where its shape differs
        from the traced single-device shape, and is replicated otherwise.
        """
        split = self._split_dims(x)
        if is_replicated(x) or self.mesh.spatial_size == 1:
            return False, split
        if split and split & local:
            raise ValueError(
                f"{self._label()}: {what} dims {sorted(split & local)} of the input "
                f"(local {tuple(x.shape)}, global {self._traced}) are split over ranks; "
                f"only dims that are whole on every rank can be {what}"
            )
        return x.dim() == 5 or bool(split), split


class SpatialPReLU(_EitherSide, nn.PReLU):
    """:class:`torch.nn.PReLU` on split blocks (weight gradient summed) or replicated tensors."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``prelu(x)`` with the single-device weight gradient after the reduction."""
        channels = {1} if self.num_parameters > 1 and x.dim() > 1 else set()
        block, _ = self._sides(x, channels, "per-channel")
        weight = self.weight if block else _shared(self.weight, self.mesh.spatial_size)
        assert weight is not None
        out = F.prelu(x, weight)
        return mark_replicated(out) if is_replicated(x) else out


class SpatialLayerNorm(_EitherSide, nn.LayerNorm):
    """:class:`torch.nn.LayerNorm` over dims that are whole on every rank.

    On a split block (e.g. channels last, ``(N, D, H, W, C)`` with
    ``normalized_shape=C``) each position is normalised locally; normalising
    over a split dim is refused. On a replicated tensor (a dense head) it is
    the plain layer.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Layer-normalise ``x`` over its last ``len(normalized_shape)`` dims."""
        normalised = set(range(x.dim() - len(self.normalized_shape), x.dim()))
        block, split = self._sides(x, normalised, "normalised")
        if block and split is None:
            raise ValueError(
                f"{self._label()}: called on a split block of shape {tuple(x.shape)} outside "
                f"the parallel model's traced forward pass, so which dims are split is "
                f"unknown; call it inside the model returned by parallelize"
            )
        weight: torch.Tensor | None = self.weight
        bias: torch.Tensor | None = self.bias
        if not block:
            spatial = self.mesh.spatial_size
            weight, bias = _shared(weight, spatial), _shared(bias, spatial)
        out = F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)
        return mark_replicated(out) if is_replicated(x) else out


class SpatialLinear(_EitherSide, nn.Linear):
    """:class:`torch.nn.Linear` on a dense head's replicated tensor or on split blocks.

    On a block whose last dim is whole on every rank (tokens, channels last) each
    position is transformed locally and the weight gradient is the block's share
    (summed over the spatial group); transforming a split dim is refused.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``linear(x)`` with the single-device weight gradient after the reduction."""
        block, _ = self._sides(x, {x.dim() - 1}, "transformed")
        weight: torch.Tensor | None = self.weight
        bias: torch.Tensor | None = self.bias
        if not block:
            spatial = self.mesh.spatial_size
            weight, bias = _shared(weight, spatial), _shared(bias, spatial)
        assert weight is not None
        out = F.linear(x, weight, bias)
        return mark_replicated(out) if is_replicated(x) else out


class SpatialAdaptiveAvgPool3d(SpatialLayer, nn.AdaptiveAvgPool3d):
    """Adaptive average pooling of a split volume.

    Global pooling (``output_size=1``) gives a tensor replicated on every
    spatial rank; any other size a volume split as the input
    (:func:`~sciml.spatial_parallel.layers.adaptive.adaptive_avg_pool`).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Average each channel over the global volume, or over each bin of it."""
        self._check_input(x)
        shape = tuple(self._global_shape(x))
        output = _adaptive_output(self.output_size, shape)
        if output != (1, 1, 1):
            return adaptive_avg_pool(self.mesh, x, shape, output)
        size, total = math.prod(x.shape[2:]), math.prod(self._global_shape(x))
        if size:  # the operator's own mean (its dtype under autocast), times the block's share
            local = F.adaptive_avg_pool3d(x, 1) * (size / total)
        else:  # an empty block adds zeros, in the dtype the operator gives on every other rank
            dtype = F.adaptive_avg_pool3d(x.new_zeros(1, 1, 1, 1, 1), 1).dtype
            local = x.sum((2, 3, 4), keepdim=True, dtype=dtype)
        return mark_replicated(replicated_sum(local, self.mesh.spatial_group))


class SpatialAdaptiveMaxPool3d(SpatialLayer, nn.AdaptiveMaxPool3d):
    """Adaptive max pooling of a split volume (the element and gradient torch picks).

    Global pooling (``output_size=1``) gives a tensor replicated on every spatial
    rank; any other size a volume split as the input
    (:func:`~sciml.spatial_parallel.layers.adaptive.adaptive_max_pool`).
    """

    def _check(self) -> None:
        if self.return_indices:
            raise ValueError(
                f"{self._label()}: return_indices=True cannot be split (the indices would "
                f"be into each rank's block, not the global volume)"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The maximum of each channel over the global volume, or over each bin of it."""
        self._check_input(x)
        shape = tuple(self._global_shape(x))
        output = _adaptive_output(self.output_size, shape)
        pooled = adaptive_max_pool(self.mesh, x, shape, output, replicated=output == (1, 1, 1))
        return mark_replicated(pooled) if output == (1, 1, 1) else pooled


def _adaptive_output(output_size: Any, size: tuple[int, ...]) -> tuple[int, ...]:
    """The global output ``(D, H, W)`` for a global input ``size`` (``None`` keeps a dim)."""
    sizes = output_size if isinstance(output_size, tuple | list) else (output_size,) * 3
    return tuple(n if s is None else int(s) for s, n in zip(sizes, size, strict=True))


class SpatialFlatten(SpatialLayer, nn.Flatten):
    """:class:`torch.nn.Flatten` of a replicated tensor, or of a split volume after gathering it.

    Used by ``head="flatten"`` networks: the gathered volume must then be small.
    """

    takes_replicated = True

    def _check(self) -> None:
        if self.start_dim == 0:
            raise ValueError(
                f"{self._label()}: start_dim=0 flattens the batch dimension, which is split over "
                f"the data-parallel replicas; flatten from start_dim >= 1"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Flatten ``x``, gathering a split volume first."""
        if is_split_volume(x):
            shape = None
            if self._traced is not None:  # known: no shape check, no shape collectives
                shape = (x.shape[0], x.shape[1], *self._global_shape(x))
            x = gather_replicated(x, self.mesh, spatial=True, batch=False, shape=shape)
        return mark_replicated(super().forward(x))


class SpatialDropout(SpatialLayer, nn.Dropout):
    """:class:`torch.nn.Dropout` whose mask is the single-device mask of the global batch.

    Every rank draws the mask of the whole global tensor from the same random
    state (seed every rank alike) and keeps its block, so results match one
    device exactly and all spatial ranks of a replicated tensor agree. The
    mask costs the memory of the global tensor: keep dropout in the dense head.
    """

    any_layout = True
    takes_replicated = True

    def takes_folded(self) -> bool:
        """Only as the identity (eval mode, ``p=0``): a mask's block would need its factors."""
        return not self.training or self.p == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Zero elements with the single-device mask (identity in eval mode)."""
        if not self.training or self.p == 0:
            return x
        if self.p == 1:
            return x * 0
        batch = self._global_batch(x)
        shape = [batch, *x.shape[1:]]
        index = [self.mesh.block([batch, 1, 1, 1, 1])[0]]
        if self._block_layout is not None:  # tokens, channels last
            shape[1:] = self._block_layout[0][1:]
            for dim, axis in self._block_layout[1]:
                index += [slice(None)] * (dim + 1 - len(index))
                index[dim] = slice(
                    *block_bounds(shape[dim], self.mesh.grid[axis])[self.mesh.spatial_coords[axis]]
                )
        elif is_split_volume(x):
            shape[2:] = self._global_shape(x)
            index = list(self.mesh.block(shape))
        mask = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(1 - self.p)
        mask = mask[tuple(index)].div_(1 - self.p)
        out = x * mask
        return mark_replicated(out) if is_replicated(x) else out


class SpatialDropout3d(SpatialLayer, nn.Dropout3d):
    """:class:`torch.nn.Dropout3d` (whole channels) with the single-device mask of the global batch.

    Every spatial rank of a sample drops the same channels.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Zero whole channels with the single-device mask (identity in eval mode)."""
        self._check_input(x)
        if not self.training or self.p == 0:
            return x
        if self.p == 1:
            return x * 0
        batch = self._global_batch(x)
        mask = torch.empty(batch, x.shape[1], 1, 1, 1, dtype=x.dtype, device=x.device)
        mask = mask.bernoulli_(1 - self.p)[self.mesh.block(mask.shape)[0]]
        return x * mask.div_(1 - self.p)
