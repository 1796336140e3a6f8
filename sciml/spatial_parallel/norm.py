"""Batch and group normalisation with statistics over the whole sample and batch."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from sciml.spatial_parallel.comm import all_reduce_sum
from sciml.spatial_parallel.layers import SpatialLayer


def _moments(
    x: torch.Tensor, dims: tuple[int, ...], group: dist.ProcessGroup
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Global count, mean, centred input and biased variance over ``dims`` and ``group``.

    Two passes (mean, then the centred sum of squares) keep float32 accurate;
    the sums are collectives whose backward sums the gradients too.
    """
    local = x.sum(dims)
    count = torch.full_like(local, math.prod(x.shape[d] for d in dims))
    stats = all_reduce_sum(torch.stack([local, count]), group)
    total, count = stats[0], stats[1].detach()
    mean = total / count
    centred = x - mean.reshape([1 if d in dims else s for d, s in enumerate(x.shape)])
    var = all_reduce_sum((centred * centred).sum(dims), group) / count
    return count, mean, centred, var


class SpatialBatchNorm3d(SpatialLayer, nn.BatchNorm3d):
    """:class:`torch.nn.BatchNorm3d` whose statistics (and running statistics) are those
    of the whole global batch: every spatial block of every data-parallel replica."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        use_batch = self.training or not self.track_running_stats
        if not use_batch:
            return F.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                self.eps,
            )  # fmt: skip
        world = dist.group.WORLD
        assert world is not None
        count, mean, centred, var = _moments(x, (0, 2, 3, 4), world)
        y = centred * torch.rsqrt(var + self.eps).view(1, -1, 1, 1, 1)
        if self.affine:
            y = y * self.weight.view(1, -1, 1, 1, 1) + self.bias.view(1, -1, 1, 1, 1)
        if self.training and self.track_running_stats:
            self._update_running(mean.detach(), var.detach(), count[0])
        return y

    @torch.no_grad()
    def _update_running(self, mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor) -> None:
        assert self.running_mean is not None and self.running_var is not None
        assert self.num_batches_tracked is not None
        self.num_batches_tracked.add_(1)
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        unbiased = var * (count / (count - 1)) if count > 1 else var
        self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
        self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)


class SpatialGroupNorm(SpatialLayer, nn.GroupNorm):
    """:class:`torch.nn.GroupNorm` of a split 3D volume: per-sample statistics over the
    whole volume (a collective over the spatial group)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        n, c = x.shape[:2]
        grouped = x.reshape(n, self.num_groups, c // self.num_groups, *x.shape[2:])
        _, _, centred, var = _moments(grouped, (2, 3, 4, 5), self.mesh.spatial_group)
        y = (centred * torch.rsqrt(var + self.eps).view(n, self.num_groups, 1, 1, 1, 1)).reshape(
            x.shape
        )
        if self.affine:
            y = y * self.weight.view(1, -1, 1, 1, 1) + self.bias.view(1, -1, 1, 1, 1)
        return y
