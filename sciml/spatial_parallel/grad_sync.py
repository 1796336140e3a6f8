"""Bucketed gradient reduction over the mesh, overlapped with the backward pass.

A parameter of a spatially split layer holds a partial gradient on each
spatial rank (its share of the global loss): these are *summed* over the
spatial group. A parameter of a replicated layer (dense head) holds the whole
gradient on every spatial rank: these are *averaged*. Both are averaged over
the data-parallel replicas, as DistributedDataParallel does. One all-reduce
over all ranks does both, with a per-parameter pre-scale.

Each backward's fresh gradient is caught by a tensor hook (so gradients
accumulated over several backward passes are reduced once), copied into a
flat bucket, and the bucket is reduced asynchronously as soon as it is full;
the reduced values are added to ``.grad`` when the backward pass ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.replicated import output_tensors


class _Bucket:
    def __init__(self, params: list[nn.Parameter], scales: list[float]) -> None:
        self.params, self.scales = params, scales
        self.sizes = [p.numel() for p in params]
        self.flags = sum(self.sizes)  # then one flag a parameter: 1 where a rank used it
        size = self.flags + len(params)
        self.buffer = torch.zeros(size, dtype=params[0].dtype, device=params[0].device)
        self.ready: set[int] = set()
        self.handle: Any = None


class GradientSync:
    """Reduce the gradients of ``params`` after every backward pass.

    Args:
        params: ``(parameter, replicated)`` pairs, in registration order.
        mesh: The process grid.
        bucket_mb: Bucket size in MiB.
    """

    def __init__(
        self,
        params: Iterable[tuple[nn.Parameter, bool]],
        mesh: SpatialMesh,
        *,
        bucket_mb: float = 25,
    ) -> None:
        """Group the gradient-carrying parameters into buckets (arguments: see the class)."""
        self.mesh = mesh
        self.enabled = True
        pairs = [(p, rep) for p, rep in params if p.requires_grad]
        spatial, data = mesh.spatial_size, mesh.data
        self.buckets: list[_Bucket] = []
        limit = int(bucket_mb * 2**20)
        current: list[tuple[nn.Parameter, float]] = []
        size = 0
        # Reverse order: the last layers' gradients are ready first.
        for param, replicated in reversed(pairs):
            scale = 1.0 / (data * spatial) if replicated else 1.0 / data
            if current and (
                size + param.numel() * param.element_size() > limit
                or param.dtype != current[0][0].dtype
            ):
                self.buckets.append(_Bucket(*map(list, zip(*current, strict=True))))
                current, size = [], 0
            current.append((param, scale))
            size += param.numel() * param.element_size()
        if current:
            self.buckets.append(_Bucket(*map(list, zip(*current, strict=True))))
        self.where = {}
        for b, bucket in enumerate(self.buckets):
            offset = 0
            for i, param in enumerate(bucket.params):
                self.where[param] = (b, i, offset)
                offset += bucket.sizes[i]
        self.handles = [p.register_hook(self._hook(p)) for p in self.where]
        self.next_bucket = 0
        self.queued = False
        self.active = dist.get_world_size() > 1

    def watch(self, output: Any) -> None:
        """Join the reduction whenever a backward pass reaches ``output``.

        A rank whose output block is empty can produce an output that depends
        on no parameter, so no parameter hook fires there; without this it would
        skip the all-reduce that the other ranks wait in.
        """
        for tensor in output_tensors(output):
            if tensor.requires_grad:
                tensor.register_hook(self._join)

    def _join(self, grad: torch.Tensor) -> None:
        if self.enabled and self.active:
            self._queue_finish()

    def _queue_finish(self) -> None:
        if not self.queued:
            self.queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)

    def _hook(self, param: nn.Parameter) -> Any:
        def hook(grad: torch.Tensor) -> torch.Tensor:
            if not (self.enabled and self.active):
                return grad
            b, i, offset = self.where[param]
            bucket = self.buckets[b]
            bucket.buffer[offset : offset + bucket.sizes[i]].copy_(grad.reshape(-1))
            bucket.buffer[offset : offset + bucket.sizes[i]].mul_(bucket.scales[i])
            bucket.buffer[bucket.flags + i] = 1
            bucket.ready.add(i)
            self._queue_finish()
            self._launch_ready()
            return torch.zeros_like(grad)

        return hook

    def _launch(self, bucket: _Bucket) -> None:
        bucket.handle = dist.all_reduce(bucket.buffer, group=self.mesh.grad_group, async_op=True)

    def _launch_ready(self) -> None:
        while self.next_bucket < len(self.buckets):
            bucket = self.buckets[self.next_bucket]
            if len(bucket.ready) < len(bucket.params):
                return
            self._launch(bucket)
            self.next_bucket += 1

    def _finish(self) -> None:
        for bucket in self.buckets[self.next_bucket :]:
            for i in set(range(len(bucket.params))) - bucket.ready:
                offset = self.where[bucket.params[i]][2]
                bucket.buffer[offset : offset + bucket.sizes[i]].zero_()  # unused this pass
                bucket.buffer[bucket.flags + i] = 0
            self._launch(bucket)
        for bucket in self.buckets:
            bucket.handle.wait()
            offset = 0
            for i, (param, size) in enumerate(zip(bucket.params, bucket.sizes, strict=True)):
                reduced = bucket.buffer[offset : offset + size].view_as(param)
                if i not in bucket.ready and not bucket.buffer[bucket.flags + i]:
                    pass  # no rank used it: no gradient, as on one device (read only then)
                elif param.grad is None:
                    param.grad = reduced.clone()
                else:
                    param.grad.add_(reduced)
                offset += size
            bucket.ready, bucket.handle = set(), None
        self.next_bucket, self.queued = 0, False

    def remove(self) -> None:
        """Remove the hooks."""
        for handle in self.handles:
            handle.remove()
