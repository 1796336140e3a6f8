"""Batch, group and instance normalisation with statistics over the whole sample and batch."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from sciml.spatial_parallel.halo.collectives import all_reduce_sum
from sciml.spatial_parallel.layers.base import SpatialLayer, statistics_dtype


def _moments(
    x: torch.Tensor, dims: tuple[int, ...], group: dist.ProcessGroup, count: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, centred input and biased variance over ``dims`` and ``group``.

    ``count`` is the global number of values per statistic (known from the
    global shape: no collective, no host synchronisation). Two passes (mean,
    then the centred sum of squares) keep float32 accurate; the sums are
    collectives whose backward sums the gradients too. The mean and variance
    keep ``dims`` (of size 1), so they broadcast against ``x`` as they are.
    """
    mean = all_reduce_sum(x.sum(dims, keepdim=True), group) / count
    centred = x - mean
    var = all_reduce_sum((centred * centred).sum(dims, keepdim=True), group) / count
    return mean, centred, var


def _affine(
    y: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
) -> torch.Tensor:
    """``y * weight + bias`` per channel, for whichever of the two the layer has."""
    if weight is not None:
        y = y * weight.view(1, -1, 1, 1, 1)
    if bias is not None:
        y = y + bias.view(1, -1, 1, 1, 1)
    return y


class _NormLayer(SpatialLayer):
    def _check_channels(self, x: torch.Tensor, channels: int) -> None:
        self._check_input(x)
        if x.shape[1] != channels:
            raise ValueError(
                f"{self._label()}: expected {channels} channels, got input of shape "
                f"{tuple(x.shape)}"
            )


class SpatialBatchNorm3d(_NormLayer, nn.BatchNorm3d):
    """:class:`torch.nn.BatchNorm3d` with the statistics of the whole global batch.

    The statistics (and running statistics) cover every spatial block of every
    data-parallel replica; for 16-bit inputs (``torch.autocast``) they are
    computed in float32 and the output has the input's dtype, as on one device.

    As on one device, a global batch with one value per channel is an error in
    training, and an empty global batch leaves the running statistics as they
    are (``num_batches_tracked`` still counts it).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` with the global batch (training) or running statistics."""
        self._check_channels(x, self.num_features)
        use_batch = self.training or not self.track_running_stats
        if not use_batch:
            return F.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        world = dist.group.WORLD
        assert world is not None
        total = math.prod(self._global_input(x)[i] for i in (0, 2, 3, 4))
        if self.training and total == 1:
            raise ValueError(
                f"{self._label()}: expected more than 1 value per channel when training, got "
                f"a global batch of one value per channel (local input {tuple(x.shape)})"
            )
        work = x.to(statistics_dtype(x))  # 16-bit inputs: statistics in float32
        mean, centred, var = _moments(work, (0, 2, 3, 4), world, total)
        y = _affine(centred * torch.rsqrt(var + self.eps), self.weight, self.bias)
        if self.training and self.track_running_stats:
            self._update_running(mean.detach().flatten(), var.detach().flatten(), total)
        return y.to(x.dtype)

    @torch.no_grad()
    def _update_running(self, mean: torch.Tensor, var: torch.Tensor, count: int) -> None:
        assert self.running_mean is not None and self.running_var is not None
        assert self.num_batches_tracked is not None
        self.num_batches_tracked.add_(1)
        if count == 0:
            return  # torch.nn.BatchNorm3d leaves the statistics of an empty batch alone
        # momentum=None: the cumulative average, its factor kept on the device (no sync) and
        # in the statistics' dtype (1 / an integer tensor is float32: 1/3 off by 1e-8)
        count_so_far = self.num_batches_tracked.to(self.running_mean.dtype)
        factor = 1.0 / count_so_far if self.momentum is None else self.momentum
        unbiased = var * (count / (count - 1))
        for running, value in ((self.running_mean, mean), (self.running_var, unbiased)):
            running.mul_(1 - factor).add_(value.to(running.dtype) * factor)


class SpatialGroupNorm(_NormLayer, nn.GroupNorm):
    """:class:`torch.nn.GroupNorm` of a split 3D volume.

    The per-sample statistics cover the whole volume (a collective over the spatial
    group).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise each sample's groups over the global volume."""
        self._check_channels(x, self.num_channels)
        n, c = x.shape[:2]
        work = x.to(statistics_dtype(x))  # 16-bit inputs: statistics in float32
        grouped = work.reshape(n, self.num_groups, c // self.num_groups, *x.shape[2:])
        count = c // self.num_groups * math.prod(self._global_shape(x))
        _, centred, var = _moments(grouped, (2, 3, 4, 5), self.mesh.spatial_group, count)
        y = (centred * torch.rsqrt(var + self.eps)).reshape(x.shape)
        return _affine(y, self.weight, self.bias).to(x.dtype)


class SpatialInstanceNorm3d(_NormLayer, nn.InstanceNorm3d):
    """:class:`torch.nn.InstanceNorm3d` of a split 3D volume.

    Each sample's per-channel statistics cover the whole volume (a collective
    over the spatial group). Running statistics (``track_running_stats``) move
    as torch moves them, by the mean over the global batch of the per-sample
    statistics (``momentum=None`` leaves them alone, as torch does), and are
    used in eval mode.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise each sample and channel over the global volume (or running statistics)."""
        if self.affine or self.track_running_stats:
            self._check_channels(x, self.num_features)
        else:  # num_features is unused: torch accepts (and warns about) any channel count
            self._check_input(x)
        if not (self.training or not self.track_running_stats):
            return F.instance_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        shape = self._global_input(x)
        volume = math.prod(shape[2:])
        if volume == 1:
            raise ValueError(
                f"{self._label()}: expected more than 1 spatial element per sample when "
                f"normalising with the input's statistics, got a global volume {shape[2:]}"
            )
        work = x.to(statistics_dtype(x))  # 16-bit inputs: statistics in float32
        mean, centred, var = _moments(work, (2, 3, 4), self.mesh.spatial_group, volume)
        y = centred * torch.rsqrt(var + self.eps)
        if self.training and self.track_running_stats and self.momentum:  # None: no update
            unbiased = var.detach().flatten(1) * (volume / (volume - 1))
            self._update_running(mean.detach().flatten(1), unbiased, shape[0], self.momentum)
        return _affine(y, self.weight, self.bias).to(x.dtype)

    @torch.no_grad()
    def _update_running(
        self, mean: torch.Tensor, unbiased: torch.Tensor, batch: int, factor: float
    ) -> None:
        """Move the running statistics by the global batch's mean of ``(N, C)`` statistics."""
        assert self.running_mean is not None and self.running_var is not None
        if batch == 0:
            raise ValueError(
                f"{self._label()}: an empty global batch has no statistics to move the "
                f"running statistics by (torch would set them to NaN)"
            )
        sums = torch.stack([mean.sum(0), unbiased.sum(0)])  # this replica's share
        if self.mesh.data > 1:  # every spatial rank of a replica holds the same values
            dist.all_reduce(sums, group=self.mesh.data_group)
        for running, value in zip((self.running_mean, self.running_var), sums / batch, strict=True):
            running.mul_(1 - factor).add_(value.to(running.dtype) * factor)
